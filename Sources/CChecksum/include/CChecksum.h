#ifndef CACHET_CCHECKSUM_H
#define CACHET_CCHECKSUM_H

#include <stddef.h>
#include <stdint.h>

// CRC-32 (the polynomial of zlib, gzip and PNG) by carry-less multiplication, for the disk tier's block checks.

/// Whether this processor has the instructions `cachet_crc32_folded` needs (PCLMULQDQ and SSE4.1).
/// Checked once; 0 on other architectures.
int cachet_crc32_folding_available(void);

/// Continues the CRC-32 `crc` (as zlib's `crc32` returns it; 0 to start) over `length` bytes at `bytes`, which
/// must be a multiple of 16 and at least 64. Only call it when `cachet_crc32_folding_available()` says so.
uint32_t cachet_crc32_folded(uint32_t crc, const unsigned char *bytes, size_t length);

/// `cachet_crc32_folded` with 16-byte registers only, even where 64-byte ones are there (for tests: the path
/// processors without AVX-512 take).
uint32_t cachet_crc32_folded_narrow(uint32_t crc, const unsigned char *bytes, size_t length);

#endif
