import Foundation

/// Runs a program to its end and returns what it printed (standard output and error together) and its
/// exit status: for tests that drive a tool (`openssl`, `cachet-cli`, `python3`).
/// - Parameters:
///   - path: the executable.
///   - arguments: its arguments.
///   - input: what to write on its standard input (then closed); nil leaves it the test's.
///   - environment: its environment; nil inherits the test's.
/// - Returns: its output and exit status.
/// - Throws: when it cannot be started.
public func runProcess(
    _ path: String,
    _ arguments: [String],
    input: String? = nil,
    environment: [String: String]? = nil
) throws -> (output: String, status: Int32) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = arguments
    if let environment { process.environment = environment }
    let output = Pipe()
    process.standardOutput = output
    process.standardError = output
    let stdin = input.map { _ in Pipe() }
    if let stdin { process.standardInput = stdin }
    try process.run()
    if let stdin, let input {
        stdin.fileHandleForWriting.write(Data(input.utf8))
        try stdin.fileHandleForWriting.close()
    }
    let data = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (String(decoding: data, as: UTF8.self), process.terminationStatus)
}
