/* silu.c — the gated activation step of ffn.c on a run of elements, scalar, AVX2 and AVX-512: SwiGLU
 * g[i] = g[i] / (1 + e^-g[i]) * u[i], and gpt-oss's clamped SwiGLU (swiglu_oai, colibri.h CB_ACT_SWIGLU_OAI).
 *
 * Role: SiLU needs one exp per element of every expert's inner activations; libm's scalar expf was the
 * last scalar loop of the expert FFN. Here e^x is one fixed sequence of IEEE operations (Cephes' expf:
 * clamp to [-87, 88], n = nearest(x * log2 e), r = x - n ln2 in two fused steps, a degree-5 polynomial
 * in fused multiply-adds, times 2^n built in the exponent bits) that the scalar reference writes with
 * fmaf / nearbyintf and the vector levels with the same operations lane by lane, so every level gives
 * the same bits. Within 2 ulp of e^x on the clamped range; below -87 it returns e^-87 (SiLU of g > 87
 * is then g itself, as in float), above 88 e^88 (SiLU of g < -88 is then g / (1 + e^88), under 1e-36
 * in magnitude for |g| < 100 where the true g e^g is smaller still: both vanish in any sum). The clamps are written as vmaxps / vminps order them, so a NaN
 * input meets the same bound on every level.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "kernels.h"

#define EXP_LO (-87.0f)
#define EXP_HI 88.0f
#define LOG2E 1.44269504088896341f
#define LN2_HI 0.693359375f          /* exact in 10 bits: n * LN2_HI is exact for |n| <= 127 */
#define LN2_LO (-2.12194440e-4f)     /* ln 2 - LN2_HI */
#define P0 1.9875691500e-4f
#define P1 1.3981999507e-3f
#define P2 8.3334519073e-3f
#define P3 4.1665795894e-2f
#define P4 1.6666665459e-1f
#define P5 5.0000001201e-1f

/* The reference e^x (the vector levels below repeat it operation by operation). */
static inline float exp_ref(float x) {
    x = x > EXP_LO ? x : EXP_LO;        /* vmaxps(x, lo): NaN -> lo */
    x = x < EXP_HI ? x : EXP_HI;        /* vminps(x, hi) */
    float n = nearbyintf(x * LOG2E);    /* in [-126, 127] */
    float r = fmaf(n, -LN2_HI, x);
    r = fmaf(n, -LN2_LO, r);
    float p = fmaf(P0, r, P1);
    p = fmaf(p, r, P2);
    p = fmaf(p, r, P3);
    p = fmaf(p, r, P4);
    p = fmaf(p, r, P5);
    float y = fmaf(p, r * r, r) + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return y * scale;
}

static inline float silu_mul_ref(float g, float u) { return g / (1.0f + exp_ref(-g)) * u; }

void cb_silu_mul_scalar(float *g, const float *u, int32_t n) {
    for (int32_t i = 0; i < n; i++) g[i] = silu_mul_ref(g[i], u[i]);
}

/* gpt-oss's clamped SwiGLU (colibri.h CB_ACT_SWIGLU_OAI). The clamps are written as vminps(limit, x) /
 * vmaxps(-limit, x) order them: a NaN input stays NaN (as torch.clamp keeps it) on every level. */
static inline float swiglu_oai_ref(float g, float u, float alpha, float limit) {
    g = limit < g ? limit : g;
    u = limit < u ? limit : u;
    u = -limit > u ? -limit : u;
    return (u + 1.0f) * (g / (1.0f + exp_ref(-(g * alpha))));
}

void cb_swiglu_oai_scalar(float *g, const float *u, int32_t n, float alpha, float limit) {
    for (int32_t i = 0; i < n; i++) g[i] = swiglu_oai_ref(g[i], u[i], alpha, limit);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define AVX2_FN static inline __attribute__((always_inline, target("avx2,fma")))
#define AVX512_FN static inline __attribute__((always_inline, target("avx512f,avx2,fma")))

AVX2_FN __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(EXP_LO)), _mm256_set1_ps(EXP_HI));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_HI), x);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_LO), r);
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(P0), r, _mm256_set1_ps(P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P5));
    __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

__attribute__((target("avx2,fma"))) void cb_silu_mul_avx2(float *g, const float *u, int32_t n) {
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 a = _mm256_loadu_ps(g + i), e = exp8(_mm256_xor_ps(a, _mm256_set1_ps(-0.0f)));   /* -g */
        __m256 s = _mm256_div_ps(a, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) g[i] = silu_mul_ref(g[i], u[i]);
}

__attribute__((target("avx2,fma"))) void cb_swiglu_oai_avx2(float *g, const float *u, int32_t n, float alpha,
                                                            float limit) {
    const __m256 lim = _mm256_set1_ps(limit), nlim = _mm256_set1_ps(-limit), al = _mm256_set1_ps(alpha);
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 a = _mm256_min_ps(lim, _mm256_loadu_ps(g + i));
        __m256 b = _mm256_max_ps(nlim, _mm256_min_ps(lim, _mm256_loadu_ps(u + i)));
        __m256 e = exp8(_mm256_xor_ps(_mm256_mul_ps(a, al), sign));
        __m256 s = _mm256_div_ps(a, _mm256_add_ps(one, e));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(_mm256_add_ps(b, one), s));
    }
    for (; i < n; i++) g[i] = swiglu_oai_ref(g[i], u[i], alpha, limit);
}

AVX512_FN __m512 exp16(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(EXP_LO)), _mm512_set1_ps(EXP_HI));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_HI), x);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_LO), r);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(P0), r, _mm512_set1_ps(P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P5));
    __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(y, _mm512_castsi512_ps(e));
}

__attribute__((target("avx512f,avx2,fma"))) void cb_silu_mul_avx512(float *g, const float *u, int32_t n) {
    int32_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 a = _mm512_loadu_ps(g + i), e = exp16(_mm512_castsi512_ps(
            _mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32((int)0x80000000u))));   /* -g */
        __m512 s = _mm512_div_ps(a, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
        _mm512_storeu_ps(g + i, _mm512_mul_ps(s, _mm512_loadu_ps(u + i)));
    }
    for (; i < n; i++) g[i] = silu_mul_ref(g[i], u[i]);
}
__attribute__((target("avx512f,avx2,fma"))) void cb_swiglu_oai_avx512(float *g, const float *u, int32_t n,
                                                                      float alpha, float limit) {
    const __m512 lim = _mm512_set1_ps(limit), nlim = _mm512_set1_ps(-limit), al = _mm512_set1_ps(alpha);
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    int32_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 a = _mm512_min_ps(lim, _mm512_loadu_ps(g + i));
        __m512 b = _mm512_max_ps(nlim, _mm512_min_ps(lim, _mm512_loadu_ps(u + i)));
        __m512 e = exp16(_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(_mm512_mul_ps(a, al)), sign)));
        __m512 s = _mm512_div_ps(a, _mm512_add_ps(one, e));
        _mm512_storeu_ps(g + i, _mm512_mul_ps(_mm512_add_ps(b, one), s));
    }
    for (; i < n; i++) g[i] = swiglu_oai_ref(g[i], u[i], alpha, limit);
}
#else
void cb_silu_mul_avx2(float *g, const float *u, int32_t n) { cb_silu_mul_scalar(g, u, n); }
void cb_silu_mul_avx512(float *g, const float *u, int32_t n) { cb_silu_mul_scalar(g, u, n); }
void cb_swiglu_oai_avx2(float *g, const float *u, int32_t n, float alpha, float limit) {
    cb_swiglu_oai_scalar(g, u, n, alpha, limit);
}
void cb_swiglu_oai_avx512(float *g, const float *u, int32_t n, float alpha, float limit) {
    cb_swiglu_oai_scalar(g, u, n, alpha, limit);
}
#endif
