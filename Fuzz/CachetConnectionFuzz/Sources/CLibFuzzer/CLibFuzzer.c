// Declarations only: libFuzzer's runtime defines LLVMFuzzerRunDriver.
#include "CLibFuzzer.h"
