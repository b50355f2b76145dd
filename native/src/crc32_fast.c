/* crc32_fast.c — CRC-32 (IEEE, zlib's checksum) at memory speed, and finiteness scans.
 *
 * Role: the checksum behind every "check before first use" of a .colibri
 * tensor (Python: format/integrity.py through cffi; C: cb_model_open(verify=1)).
 * x86-64 with PCLMULQDQ: four-way carry-less-multiply folding of 64-byte blocks
 * (Gopal et al., "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ",
 * Intel 2009; the reflected-domain constants of the IEEE polynomial, the same as
 * zlib/Chromium's crc32_simd.c), selected per function with a target attribute
 * and at run time with cpuid. Elsewhere, and for the tail, slicing-by-8 tables.
 * Both paths give zlib.crc32's value for any length and chaining (tests compare).
 *
 * cb_count_nonfinite: NaN/Inf words in f32/f16/bf16 data (exponent all ones),
 * plain loops the compiler vectorises; used on scales and float expert data.
 */
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include "colibri.h"

static uint32_t tab[8][256];
static volatile int tab_ready;

static void tab_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        tab[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int s = 1; s < 8; s++) tab[s][i] = (tab[s - 1][i] >> 8) ^ tab[0][tab[s - 1][i] & 0xFF];
    tab_ready = 1;   /* idempotent: racing initialisers write identical values */
}

/* c: the running register (already inverted) */
static uint32_t crc_slice8(uint32_t c, const uint8_t *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) { c = tab[0][(c ^ *p++) & 0xFF] ^ (c >> 8); n--; }
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4); memcpy(&hi, p + 4, 4);   /* little-endian hosts only (x86-64, aarch64) */
        lo ^= c;
        c = tab[7][lo & 0xFF] ^ tab[6][(lo >> 8) & 0xFF] ^ tab[5][(lo >> 16) & 0xFF] ^ tab[4][lo >> 24]
          ^ tab[3][hi & 0xFF] ^ tab[2][(hi >> 8) & 0xFF] ^ tab[1][(hi >> 16) & 0xFF] ^ tab[0][hi >> 24];
        p += 8; n -= 8;
    }
    while (n--) c = tab[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define CB_HAVE_CLMUL 1

static int clmul_ok(void) {
    static int cached = -1;
    if (cached < 0) {
        unsigned a, b, c, d;
        cached = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 1)) && (c & (1u << 19)); /* PCLMUL, SSE4.1 */
    }
    return cached;
}

/* n >= 64 and a multiple of 16; c: the running register (inverted). */
__attribute__((target("pclmul,sse4.1")))
static uint32_t crc_clmul(uint32_t c, const uint8_t *p, size_t n) {
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8;
    x1 = _mm_loadu_si128((const __m128i *)(p + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(p + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(p + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(p + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)c));
    x0 = k1k2;
    p += 64; n -= 64;
    while (n >= 64) {
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00); x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x7 = _mm_clmulepi64_si128(x3, x0, 0x00); x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11); x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
        x3 = _mm_clmulepi64_si128(x3, x0, 0x11); x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), _mm_loadu_si128((const __m128i *)(p + 0x00)));
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), _mm_loadu_si128((const __m128i *)(p + 0x10)));
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), _mm_loadu_si128((const __m128i *)(p + 0x20)));
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), _mm_loadu_si128((const __m128i *)(p + 0x30)));
        p += 64; n -= 64;
    }
    x0 = k3k4;   /* fold the four lanes into one */
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00); x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00); x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00); x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
    while (n >= 16) {
        x2 = _mm_loadu_si128((const __m128i *)p);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00); x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        p += 16; n -= 16;
    }
    /* 128 -> 64 bits */
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
    x3 = _mm_setr_epi32(~0, 0, ~0, 0);
    x1 = _mm_srli_si128(x1, 8);
    x1 = _mm_xor_si128(x1, x2);
    x0 = k5k0;
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, x3);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    /* Barrett reduction to 32 bits */
    x0 = poly;
    x2 = _mm_and_si128(x1, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
    x2 = _mm_and_si128(x2, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

uint32_t cb_crc32_update(uint32_t crc, const void *data, size_t n) {
    if (!tab_ready) tab_init();
    const uint8_t *p = (const uint8_t *)data;
    uint32_t c = ~crc;
#ifdef CB_HAVE_CLMUL
    if (n >= 64 && clmul_ok()) {
        size_t body = n & ~(size_t)15;
        c = crc_clmul(c, p, body);
        p += body; n -= body;
    }
#endif
    return ~crc_slice8(c, p, n);
}

int64_t cb_count_nonfinite(const void *data, size_t n, int32_t kind) {
    int64_t bad = 0;
    if (kind == 0) {                       /* f32 */
        const uint8_t *p = (const uint8_t *)data;
        for (size_t i = 0; i < n; i++) {
            uint32_t u; memcpy(&u, p + 4 * i, 4);
            bad += (u & 0x7F800000u) == 0x7F800000u;
        }
    } else if (kind == 1 || kind == 2) {   /* f16, bf16 */
        const uint8_t *p = (const uint8_t *)data;
        uint16_t mask = kind == 1 ? 0x7C00u : 0x7F80u;
        for (size_t i = 0; i < n; i++) {
            uint16_t u; memcpy(&u, p + 2 * i, 2);
            bad += (uint16_t)(u & mask) == mask;
        }
    } else {
        return -1;
    }
    return bad;
}
