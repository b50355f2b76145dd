/* kernels_lut_avx2.h — the AVX2 8-lane decoders of llama.cpp's table-valued 4-bit blocks (MXFP4).
 *
 * Role: included by kernels_avx2.c only (its AVX2_KERNELS list names these decoders; AVX-512 runs
 * them through that level's fallback). Each code is an index into a 16-entry int8 table, so 8 codes
 * become 8 int8 values with one pshufb, then 8 floats times the block's scale: the scalar decoder's
 * (float)value * scale products (decode.c), the same bits.
 */
#ifndef CB_KERNELS_LUT_AVX2_H
#define CB_KERNELS_LUT_AVX2_H
#include "kernels_x86.h"
#include "mxfp4.h"

/* Codes at p[0..7] (one nibble each: shift 0 low, 4 high) looked up in the 16-byte table lut, as 8 floats. */
AVX2_FN __m256 lut8(const __m128i lut, const unsigned char *p, int shift) {
    __m128i b = _mm_loadl_epi64((const __m128i *)p);
    __m128i idx = _mm_and_si128(_mm_srl_epi16(b, _mm_cvtsi32_si128(shift)), _mm_set1_epi8(15));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_shuffle_epi8(lut, idx)));
}

/* llama.cpp MXFP4 codes k..k+7 (k a multiple of 8: one block's low or high nibbles, mxfp4.h): kv[q] * d. */
AVX2_FN __m256 dec8_mxfp4(const unsigned char *row, int32_t zero, size_t k) {
    const unsigned char *blk = row + k / CB_QK_MXFP4 * CB_MXFP4_BYTES;
    size_t j = k % CB_QK_MXFP4;
    __m256 v = lut8(_mm_loadu_si128((const __m128i *)CB_MXFP4_VALUES), cb_mxfp4_qs(blk, j), cb_mxfp4_shift(j));
    return _mm256_mul_ps(v, _mm256_set1_ps(cb_e8m0_half(blk[0])));
}
#endif
