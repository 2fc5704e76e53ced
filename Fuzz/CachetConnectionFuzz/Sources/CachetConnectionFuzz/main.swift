import CLibFuzzer

#if canImport(Glibc)
import Glibc
#endif

// The package manager gives an executable its own `main`; this one hands the process to libFuzzer's driver,
// which calls `LLVMFuzzerInitialize` and then `LLVMFuzzerTestOneInput` for every input.
var argc = CommandLine.argc
var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
exit(LLVMFuzzerRunDriver(&argc, &argv) { data, size in fuzzTestOneInput(data, size) })
