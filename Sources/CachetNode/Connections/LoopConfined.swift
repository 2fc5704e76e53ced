/// A value made on a loop's queue and used only there, carried through a closure that another thread holds
/// meanwhile (the disk worker's completion hops back to the loop before touching it).
final class LoopConfined<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
