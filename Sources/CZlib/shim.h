#ifndef CACHET_CZLIB_SHIM_H
#define CACHET_CZLIB_SHIM_H
#include <zlib.h>
#endif
