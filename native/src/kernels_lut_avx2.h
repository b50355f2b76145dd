/* kernels_lut_avx2.h — the AVX2 8-lane decoders of llama.cpp's table-valued 4-bit blocks (MXFP4, IQ4_XS,
 * IQ4_NL).
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
#include "iquants.h"

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

/* An f16 at p widened with F16C (exact: the same float as iquants.h cb_iq_half). */
AVX2_FN float lut_half(const unsigned char *p) {
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(p[0] | p[1] << 8)));
}

/* llama.cpp IQ4_XS codes k..k+7 (k a multiple of 8: one sub-block's low or high nibbles, iquants.h): kv[q] times
 * the scalar decoder's dl = d * (ls - 32). */
AVX2_FN __m256 dec8_iq4_xs(const unsigned char *row, int32_t zero, size_t k) {
    const unsigned char *blk = row + k / CB_QK_IQ4_XS * CB_IQ4_XS_BYTES;
    size_t j = k % CB_QK_IQ4_XS;
    __m256 v = lut8(_mm_loadu_si128((const __m128i *)CB_IQ4_VALUES), cb_iq4_xs_qs(blk, j), cb_iq4_shift(j));
    return _mm256_mul_ps(_mm256_set1_ps(cb_iq4_xs_factor_of(blk, j, lut_half(blk))), v);
}

/* llama.cpp IQ4_NL codes k..k+7 (k a multiple of 8: one block's low or high nibbles): d * kv[q]. */
AVX2_FN __m256 dec8_iq4_nl(const unsigned char *row, int32_t zero, size_t k) {
    const unsigned char *blk = row + k / CB_QK_IQ4_NL * CB_IQ4_NL_BYTES;
    size_t j = k % CB_QK_IQ4_NL;
    __m256 v = lut8(_mm_loadu_si128((const __m128i *)CB_IQ4_VALUES), cb_iq4_nl_qs(blk, j), cb_iq4_shift(j));
    return _mm256_mul_ps(_mm256_set1_ps(lut_half(blk)), v);
}
#endif
