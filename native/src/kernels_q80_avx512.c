/* kernels_q80_avx512.c — the AVX-512 build of the x Q8_0 / x Q8_1 kernel (kernels_q80.c has the spec).
 *
 * Role: cb_dot_rows_q80 at the avx512 and amx levels: kernels_q80_tiles.h (256-bit operations) compiled with the
 * AVX-512 target, so the compiler may use EVEX encodings and the 32 vector registers, and a block's products
 * summed by one 256-bit vpdpbusd (AVX512-VNNI with VL) where AVX2 takes vpmaddubsw + vpmaddwd: the same exact
 * int32 sums, the AVX2 level's bits (no 512-bit form yet: AVX-512 has no vpsignb, a zmm form needs masked
 * negation). The level tests compare it with the scalar kernel where the CPU has AVX-512 (run on Zen 4).
 */
#include "kernels.h"
#include "q80.h"
#include "q5quants.h"
#include "mxfp4.h"
#include "iquants.h"
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "kernels_kq_x86.h"

#define A512_TARGET "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c"
#define Q80_FN static inline __attribute__((always_inline, target(A512_TARGET)))
#define Q80_OUTLINE __attribute__((noinline, target(A512_TARGET)))
#define Q80_ENTRY cb_dot_rows_q80_avx512
#define Q80_DOT4(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)
#include "kernels_q80_tiles.h"
#else
void cb_dot_rows_q80_avx512(const cb_matrix *w, int32_t r0, int32_t r1, const cb_q80_block *const *xa,
                            float *const *outs, int64_t nt) {
    cb_dot_rows_q80_scalar(w, r0, r1, xa, outs, nt);
}
#endif
