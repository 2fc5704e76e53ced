/// Where a slot's value is.
enum BinarySlot {
    case none
    /// A primitive's bytes, and its kind.
    case bytes(Range<Int>, BinaryKind)
    /// A structure: its tag's offset.
    case structure(Int)
}
