/* simd.c — the kernel dispatch table: one per cb_simd level, chosen once at start-up.
 *
 * Role: reads the CPU's features (cpuid) and what the OS saves on a context
 * switch (xgetbv), picks the best kernel table, caps it by COLIBRI_SIMD, and
 * hands it to every matrix product (cb_kernels()). cb_simd_force() lets tests
 * and benchmarks switch tables in-process; level names live here only.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "cb_internal.h"
#include "kernels.h"
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

static const cb_kernel_table TABLES[] = {
    {.level = CB_SIMD_SCALAR, .name = "scalar", .dot_rows = cb_dot_rows_scalar, .dot_rows_q8 = cb_dot_rows_q8_scalar,
     .dot_rows_q4 = cb_dot_rows_q4_scalar, .dot_rows_q6 = cb_dot_rows_q6_scalar, .dot_rows_kq = cb_dot_rows_kq_scalar,
     .dot_rows_q80 = cb_dot_rows_q80_scalar,
     .quantize_q8 = cb_quantize_q8_scalar, .amax = cb_amax_scalar,
     .pv_rows = cb_pv_rows_scalar, .f16_row = cb_f16_row_scalar, .silu_mul = cb_silu_mul_scalar,
     .swiglu_oai = cb_swiglu_oai_scalar},
    {.level = CB_SIMD_AVX2, .name = "avx2", .dot_rows = cb_dot_rows_avx2, .dot_rows_q8 = cb_dot_rows_q8_avx2,
     .dot_rows_q4 = cb_dot_rows_q4_avx2, .dot_rows_q6 = cb_dot_rows_q6_avx2, .dot_rows_kq = cb_dot_rows_kq_avx2,
     .dot_rows_q80 = cb_dot_rows_q80_avx2,
     .quantize_q8 = cb_quantize_q8_avx2, .amax = cb_amax_avx2,
     .pv_rows = cb_pv_rows_avx2, .f16_row = cb_f16_row_avx2, .silu_mul = cb_silu_mul_avx2,
     .swiglu_oai = cb_swiglu_oai_avx2},
    {.level = CB_SIMD_AVX512, .name = "avx512", .dot_rows = cb_dot_rows_avx512, .dot_rows_q8 = cb_dot_rows_q8_avx512,
     .dot_rows_q4 = cb_dot_rows_q4_avx512, .dot_rows_q6 = cb_dot_rows_q6_avx2, .dot_rows_kq = cb_dot_rows_kq_avx512,
     .dot_rows_q80 = cb_dot_rows_q80_avx512,
     .quantize_q8 = cb_quantize_q8_avx512, .amax = cb_amax_avx2,
     .pv_rows = cb_pv_rows_avx2, .f16_row = cb_f16_row_avx2, .silu_mul = cb_silu_mul_avx512,
     .swiglu_oai = cb_swiglu_oai_avx512},
    {.level = CB_SIMD_AMX, .name = "amx", .dot_rows = cb_dot_rows_avx512, .dot_rows_q8 = cb_dot_rows_q8_avx512,
     .dot_rows_q4 = cb_dot_rows_q4_avx512, .dot_rows_q6 = cb_dot_rows_q6_avx2, .dot_rows_kq = cb_dot_rows_kq_avx512,
     .dot_rows_q80 = cb_dot_rows_q80_avx512,
     .quantize_q8 = cb_quantize_q8_avx512, .amax = cb_amax_avx2,
     .pack_q8_tiles = cb_pack_q8_tiles_amx, .dot_rows_q8_tiles = cb_dot_rows_q8_tiles_amx,
     .pv_rows = cb_pv_rows_avx2, .f16_row = cb_f16_row_avx2, .silu_mul = cb_silu_mul_avx512,
     .swiglu_oai = cb_swiglu_oai_avx512},
};
#define N_TABLES (int)(sizeof TABLES / sizeof TABLES[0])

static char missing[N_TABLES][128];      /* per table: flags the CPU/OS lacks ("" = supported) */
static pthread_once_t features_once = PTHREAD_ONCE_INIT;
static _Atomic(const cb_kernel_table *) active;

static const cb_kernel_table *table_of(int32_t level) {
    for (int i = 0; i < N_TABLES; i++)
        if (TABLES[i].level == level) return &TABLES[i];
    return NULL;
}

static void need(char *buf, int have, const char *flag) {
    if (have) return;
    size_t n = strlen(buf);
    snprintf(buf + n, 128 - n, "%s%s", n ? " " : "", flag);
}

static void read_features(void) {
    int avx2 = 0, fma = 0, f16c = 0, osymm = 0, f = 0, dq = 0, bw = 0, vl = 0, vnni = 0, oszmm = 0;
    int amx_tile = 0, amx_int8 = 0, osamx = 0;
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
        if (((c >> 27) & 1) && ((c >> 28) & 1)) {      /* OSXSAVE + AVX */
            unsigned lo, hi;
            __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
            osymm = (lo & 6u) == 6u;                    /* xmm + ymm state */
            oszmm = osymm && (lo & 0xe0u) == 0xe0u;     /* opmask + zmm0-15 upper + zmm16-31 */
        }
    }
    if (__get_cpuid_max(0, 0) >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        avx2 = (b >> 5) & 1, f = (b >> 16) & 1, dq = (b >> 17) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
        vnni = (c >> 11) & 1;
        amx_tile = (d >> 24) & 1, amx_int8 = (d >> 25) & 1;
    }
    if (oszmm && amx_tile && amx_int8 && cb_amx_request()) {   /* Linux grants the tile state on request */
        unsigned lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        osamx = (lo & 0x60000u) == 0x60000u;
    }
#endif
    char *m2 = missing[1], *m5 = missing[2];
    need(m2, avx2, "avx2"), need(m2, fma, "fma"), need(m2, f16c, "f16c"), need(m2, osymm, "os-ymm-state");
    strcpy(m5, m2);
    need(m5, f, "avx512f"), need(m5, bw, "avx512bw"), need(m5, vl, "avx512vl"), need(m5, dq, "avx512dq");
    need(m5, vnni, "avx512_vnni"), need(m5, oszmm, "os-zmm-state");
    char *mx = missing[3];
    strcpy(mx, m5);
    need(mx, amx_tile, "amx_tile"), need(mx, amx_int8, "amx_int8"), need(mx, osamx, "os-amx-permission");
}

const char *cb_simd_missing(int32_t level) {
    pthread_once(&features_once, read_features);
    for (int i = 0; i < N_TABLES; i++)
        if (TABLES[i].level == level) return missing[i];
    return "unknown level";
}

int32_t cb_simd_best(void) {
    int32_t best = CB_SIMD_SCALAR;
    for (int i = 0; i < N_TABLES; i++)
        if (!cb_simd_missing(TABLES[i].level)[0]) best = TABLES[i].level;
    return best;
}

const char *cb_simd_level_name(int32_t level) {
    const cb_kernel_table *t = table_of(level);
    return t ? t->name : NULL;
}

int32_t cb_simd_level_of(const char *name) {
    for (int i = 0; name && i < N_TABLES; i++)
        if (strcmp(TABLES[i].name, name) == 0) return TABLES[i].level;
    return -1;
}

/* Best supported level, capped by COLIBRI_SIMD (an unknown name is ignored). */
static const cb_kernel_table *detect(void) {
    int32_t best = cb_simd_best(), want = cb_simd_level_of(getenv("COLIBRI_SIMD"));
    return table_of(want >= 0 && want < best ? want : best);
}

const cb_kernel_table *cb_kernels(void) {
    const cb_kernel_table *t = atomic_load_explicit(&active, memory_order_acquire);
    if (!t) {
        t = detect();
        atomic_store_explicit(&active, t, memory_order_release);
    }
    return t;
}

__attribute__((constructor)) static void choose_at_load(void) { (void)cb_kernels(); }

int cb_simd_level(void) { return cb_kernels()->level; }

const char *cb_simd_name(void) { return cb_kernels()->name; }

cb_status cb_simd_force(int level) {
    if (level < 0) {
        atomic_store(&active, detect());
        return CB_OK;
    }
    const cb_kernel_table *t = table_of(level);
    if (!t) return cb_fail(CB_E_INVALID, "simd level must be -1 (auto), 0 (scalar), 2 (avx2), 3 (avx512) or 4 (amx), got %d", level);
    const char *miss = cb_simd_missing(level);
    if (miss[0]) return cb_fail(CB_E_UNSUPPORTED, "simd level %s: this CPU/OS lacks %s", t->name, miss);
    atomic_store(&active, t);
    return CB_OK;
}
