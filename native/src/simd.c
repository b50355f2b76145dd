/* simd.c — run-time choice between the AVX2/FMA/F16C kernels and portable C.
 *
 * Role: decides once (cpuid + xgetbv, then COLIBRI_SIMD=scalar) which kernel
 * family the dot products use; cb_simd_force() lets tests flip it in-process.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "cb_internal.h"
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

static atomic_int level_cache = -1;

static int cpu_has_avx2(void) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    if (!(fma && osxsave && avx && f16c)) return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 6u) != 6u) return 0;           /* OS saves xmm and ymm state */
    if (__get_cpuid_max(0, 0) < 7) return 0;
    __cpuid_count(7, 0, a, b, c, d);
    return (b >> 5) & 1;
#else
    return 0;
#endif
}

static int detect(void) {
    const char *env = getenv("COLIBRI_SIMD");
    if (env && strcmp(env, "scalar") == 0) return 0;
    return cpu_has_avx2() ? 2 : 0;
}

int cb_simd_level(void) {
    int l = atomic_load(&level_cache);
    if (l < 0) {
        l = detect();
        atomic_store(&level_cache, l);
    }
    return l;
}

const char *cb_simd_name(void) { return cb_simd_level() == 2 ? "avx2" : "scalar"; }

cb_status cb_simd_force(int level) {
    if (level < 0) {
        atomic_store(&level_cache, detect());
        return CB_OK;
    }
    if (level == 0) {
        atomic_store(&level_cache, 0);
        return CB_OK;
    }
    if (level == 2) {
        if (!cpu_has_avx2()) return cb_fail(CB_E_UNSUPPORTED, "this CPU lacks AVX2/FMA/F16C");
        atomic_store(&level_cache, 2);
        return CB_OK;
    }
    return cb_fail(CB_E_INVALID, "simd level must be -1 (auto), 0 (scalar) or 2 (avx2), got %d", level);
}
