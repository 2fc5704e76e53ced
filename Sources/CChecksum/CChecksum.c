// CRC-32 by folding with carry-less multiplication, after "Fast CRC Computation for Generic Polynomials Using
// PCLMULQDQ Instruction" (Gopal, Ozturk et al., Intel, 2009), in the bit-reflected form zlib's CRC-32 uses.
//
// Four 128-bit lanes take 64 bytes a step: each lane is multiplied by x^512 mod P (split in two 64-bit
// halves, one multiplication each) and the next 64 bytes added. The lanes then fold into one by x^128 mod P,
// the remaining 16-byte pieces likewise, and the 128 bits left are reduced to 64, then to 32 (Barrett).
// The constants are powers of x modulo P, bit-reflected and shifted as the paper gives them.

#include "CChecksum.h"

#if defined(__x86_64__)
#include <immintrin.h>

// Whether the processor has what each path needs: -1 until first asked (threads that ask at once all find
// the same answer).
static int folding_known = -1;
static int wide_known = -1;

int cachet_crc32_folding_available(void) {
    int known = __atomic_load_n(&folding_known, __ATOMIC_RELAXED);
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
        __atomic_store_n(&folding_known, known, __ATOMIC_RELAXED);
    }
    return known;
}

// x^(512+32) and x^(512-32) mod P: one 64-byte step (bit-reflected, shifted left by one, as the paper gives
// its constants).
#define FOLD_BY_FOUR_LOW 0x0154442bd4ULL
#define FOLD_BY_FOUR_HIGH 0x01c6e41596ULL
// x^(128+32) and x^(128-32) mod P: one 16-byte step.
#define FOLD_BY_ONE_LOW 0x01751997d0ULL
#define FOLD_BY_ONE_HIGH 0x00ccaa009eULL
// x^64 mod P: 96 bits to 64.
#define FOLD_64 0x0163cd6124ULL
// P and floor(x^64 / P), for the Barrett reduction.
#define POLYNOMIAL 0x01db710641ULL
#define BARRETT_MU 0x01f7011641ULL

__attribute__((target("pclmul,sse4.1")))
static inline __m128i fold(__m128i lane, __m128i constants, __m128i next) {
    __m128i low = _mm_clmulepi64_si128(lane, constants, 0x00);
    __m128i high = _mm_clmulepi64_si128(lane, constants, 0x11);
    return _mm_xor_si128(_mm_xor_si128(low, high), next);
}

// Folds four consecutive 16-byte lanes into one, then the remaining 16-byte pieces of `bytes`, and reduces
// the 128 bits left to the CRC (still inverted).
__attribute__((target("pclmul,sse4.1")))
static inline uint32_t finish(__m128i a, __m128i b, __m128i c, __m128i d, const unsigned char *bytes, size_t length) {
    const __m128i by_one = _mm_set_epi64x((long long)FOLD_BY_ONE_HIGH, (long long)FOLD_BY_ONE_LOW);
    __m128i lane = fold(a, by_one, b);
    lane = fold(lane, by_one, c);
    lane = fold(lane, by_one, d);
    while (length >= 16) {
        lane = fold(lane, by_one, _mm_loadu_si128((const __m128i *)bytes));
        bytes += 16;
        length -= 16;
    }

    // 128 bits to 96: the low 64 bits times the 16-byte step's second constant, added to the high 64.
    const __m128i low_32_of_each = _mm_setr_epi32(~0, 0, ~0, 0);
    __m128i folded = _mm_xor_si128(_mm_srli_si128(lane, 8), _mm_clmulepi64_si128(lane, by_one, 0x10));
    // 96 bits to 64.
    const __m128i by_64 = _mm_set_epi64x(0, (long long)FOLD_64);
    folded = _mm_xor_si128(
        _mm_srli_si128(folded, 4), _mm_clmulepi64_si128(_mm_and_si128(folded, low_32_of_each), by_64, 0x00));
    // Barrett: the quotient's estimate from mu, times P, taken away leaves the remainder in bits 32 to 63.
    const __m128i barrett = _mm_set_epi64x((long long)BARRETT_MU, (long long)POLYNOMIAL);
    __m128i estimate = _mm_clmulepi64_si128(_mm_and_si128(folded, low_32_of_each), barrett, 0x10);
    estimate = _mm_clmulepi64_si128(_mm_and_si128(estimate, low_32_of_each), barrett, 0x00);
    return ~(uint32_t)_mm_extract_epi32(_mm_xor_si128(folded, estimate), 1);
}

// Four 64-byte lanes (AVX-512 registers) take 256 bytes a step, each multiplied by x^2048 mod P; they then
// fold into one by x^512, and its four 16-byte lanes go on as above. About four times the speed of the
// 16-byte lanes where the processor multiplies 512 bits at a time (VPCLMULQDQ).
#define FOLD_BY_SIXTEEN_LOW 0x011542778aULL
#define FOLD_BY_SIXTEEN_HIGH 0x01322d1430ULL

__attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.1")))
static inline __m512i fold_wide(__m512i lane, __m512i constants, __m512i next) {
    __m512i low = _mm512_clmulepi64_epi128(lane, constants, 0x00);
    __m512i high = _mm512_clmulepi64_epi128(lane, constants, 0x11);
    return _mm512_ternarylogic_epi64(low, high, next, 0x96);
}

__attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.1")))
static uint32_t crc32_wide(uint32_t crc, const unsigned char *bytes, size_t length) {
    const __m512i by_sixteen = _mm512_broadcast_i32x4(
        _mm_set_epi64x((long long)FOLD_BY_SIXTEEN_HIGH, (long long)FOLD_BY_SIXTEEN_LOW));
    const __m512i by_four = _mm512_broadcast_i32x4(
        _mm_set_epi64x((long long)FOLD_BY_FOUR_HIGH, (long long)FOLD_BY_FOUR_LOW));
    __m512i a = _mm512_loadu_si512((const void *)(bytes + 0));
    __m512i b = _mm512_loadu_si512((const void *)(bytes + 64));
    __m512i c = _mm512_loadu_si512((const void *)(bytes + 128));
    __m512i d = _mm512_loadu_si512((const void *)(bytes + 192));
    // Zero-extended: a cast would leave the upper 384 bits undefined (garbage in an unoptimized build).
    a = _mm512_xor_si512(a, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)~crc)));
    bytes += 256;
    length -= 256;
    while (length >= 256) {
        a = fold_wide(a, by_sixteen, _mm512_loadu_si512((const void *)(bytes + 0)));
        b = fold_wide(b, by_sixteen, _mm512_loadu_si512((const void *)(bytes + 64)));
        c = fold_wide(c, by_sixteen, _mm512_loadu_si512((const void *)(bytes + 128)));
        d = fold_wide(d, by_sixteen, _mm512_loadu_si512((const void *)(bytes + 192)));
        bytes += 256;
        length -= 256;
    }
    __m512i lane = fold_wide(a, by_four, b);
    lane = fold_wide(lane, by_four, c);
    lane = fold_wide(lane, by_four, d);
    while (length >= 64) {
        lane = fold_wide(lane, by_four, _mm512_loadu_si512((const void *)bytes));
        bytes += 64;
        length -= 64;
    }
    return finish(
        _mm512_extracti32x4_epi32(lane, 0), _mm512_extracti32x4_epi32(lane, 1), _mm512_extracti32x4_epi32(lane, 2),
        _mm512_extracti32x4_epi32(lane, 3), bytes, length);
}

static int wide_available(void) {
    int known = __atomic_load_n(&wide_known, __ATOMIC_RELAXED);
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")
            && __builtin_cpu_supports("vpclmulqdq") && cachet_crc32_folding_available();
        __atomic_store_n(&wide_known, known, __ATOMIC_RELAXED);
    }
    return known;
}

uint32_t cachet_crc32_folded(uint32_t crc, const unsigned char *bytes, size_t length) {
    if (length >= 256 && wide_available()) return crc32_wide(crc, bytes, length);
    return cachet_crc32_folded_narrow(crc, bytes, length);
}

__attribute__((target("pclmul,sse4.1")))
uint32_t cachet_crc32_folded_narrow(uint32_t crc, const unsigned char *bytes, size_t length) {
    const __m128i by_four = _mm_set_epi64x((long long)FOLD_BY_FOUR_HIGH, (long long)FOLD_BY_FOUR_LOW);

    __m128i a = _mm_loadu_si128((const __m128i *)(bytes + 0));
    __m128i b = _mm_loadu_si128((const __m128i *)(bytes + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(bytes + 32));
    __m128i d = _mm_loadu_si128((const __m128i *)(bytes + 48));
    // zlib's CRC is kept inverted: the register starts as its complement, added to the first bytes.
    a = _mm_xor_si128(a, _mm_cvtsi32_si128((int)~crc));
    bytes += 64;
    length -= 64;

    while (length >= 64) {
        a = fold(a, by_four, _mm_loadu_si128((const __m128i *)(bytes + 0)));
        b = fold(b, by_four, _mm_loadu_si128((const __m128i *)(bytes + 16)));
        c = fold(c, by_four, _mm_loadu_si128((const __m128i *)(bytes + 32)));
        d = fold(d, by_four, _mm_loadu_si128((const __m128i *)(bytes + 48)));
        bytes += 64;
        length -= 64;
    }
    return finish(a, b, c, d, bytes, length);
}

#else

int cachet_crc32_folding_available(void) { return 0; }

uint32_t cachet_crc32_folded_narrow(uint32_t crc, const unsigned char *bytes, size_t length) {
    (void)bytes;
    (void)length;
    return crc;
}

uint32_t cachet_crc32_folded(uint32_t crc, const unsigned char *bytes, size_t length) {
    (void)bytes;
    (void)length;
    return crc;
}

#endif
