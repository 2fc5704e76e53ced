/// The answers of a fan-out, gathered on the loop as they come.
final class FanOutAnswers {
    var outcomes: [ForwardOutcome?]
    var remaining: Int

    init(count: Int) {
        outcomes = Array(repeating: nil, count: count)
        remaining = count
    }
}
