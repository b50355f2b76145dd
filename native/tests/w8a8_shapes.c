/* w8a8 kernel on odd shapes: the active level's cb_dot_rows_q8 equals the scalar kernel bit for bit
 * for K off every tile width (1..65, 150, 333, 16384/16385 around the AMX limit), row ranges that are
 * not multiples of 16 (and start mid-matrix), 1..40 tokens, extreme codes (+-127), and from two
 * threads at once (each configures its own AMX tiles). The weights end at a PROT_NONE page, so a
 * tile load past the matrix (which ASan cannot see) faults. Run per level by `make check`. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "colibri.h"
#include "kernels.h"
#include "check.h"

enum { MAX_T = 40 };

typedef struct {
    unsigned char *map;
    size_t map_bytes;
    int8_t *w;          /* rows x K, ending at the guard page */
} guarded;

static guarded guarded_alloc(size_t bytes) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE), body = (bytes + page - 1) / page * page;
    guarded g = {NULL, body + page, NULL};
    g.map = mmap(NULL, g.map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g.map == MAP_FAILED) { g.map = NULL; return g; }
    mprotect(g.map + body, page, PROT_NONE);
    g.w = (int8_t *)(g.map + body - bytes);
    return g;
}

static int16_t xq_buf[MAX_T][16400];
static float sx[MAX_T], scales[128], got[MAX_T][128], want[MAX_T][128];

static void fill(unsigned *s, int8_t *w, size_t n, int extreme) {
    for (size_t i = 0; i < n; i++) {
        float v = rnd(s);
        w[i] = (int8_t)(extreme ? (v < 0 ? -127 : 127) : (int)(v * 127.0f));
    }
}

/* One shape: rows [r0, r1) of a rows x K matrix against nt tokens, active level vs scalar. */
static int same_as_scalar(const cb_matrix *m, int32_t r0, int32_t r1, int64_t nt) {
    const int16_t *xs[MAX_T];
    float *g[MAX_T], *h[MAX_T];
    for (int t = 0; t < MAX_T; t++) xs[t] = xq_buf[t], g[t] = got[t], h[t] = want[t];
    memset(got, 0, sizeof got), memset(want, 0, sizeof want);
    cb_dot_rows_q8(m, r0, r1, xs, sx, g, nt);
    cb_dot_rows_q8_scalar(m, r0, r1, xs, sx, h, nt);
    for (int t = 0; t < nt; t++)
        if (memcmp(got[t], want[t], sizeof got[t]) != 0) return 0;
    return 1;
}

static void odd_shapes(unsigned *s) {
    static const int32_t Ks[] = {1, 3, 63, 64, 65, 150, 333};
    static const int32_t Rs[][2] = {{0, 1}, {0, 15}, {0, 16}, {0, 17}, {5, 52}, {0, 64}, {3, 68}, {0, 81}, {7, 100}};
    for (size_t a = 0; a < sizeof Ks / sizeof Ks[0]; a++) {
        int32_t K = Ks[a];
        guarded g = guarded_alloc((size_t)100 * (size_t)K);
        CHECK(g.map != NULL);
        if (!g.map) return;
        for (int extreme = 0; extreme < 2; extreme++) {
            fill(s, g.w, (size_t)100 * (size_t)K, extreme);
            for (int t = 0; t < MAX_T; t++)
                for (int32_t k = 0; k < K; k++)
                    xq_buf[t][k] = (int16_t)(extreme ? ((t + k) % 2 ? -127 : 127) : (int)(rnd(s) * 127.0f));
            cb_matrix m = {g.w, scales, NULL, CB_I8_ROW, 100, K};
            for (size_t b = 0; b < sizeof Rs / sizeof Rs[0]; b++)
                for (int64_t nt = 1; nt <= MAX_T; nt++) {
                    int ok = same_as_scalar(&m, Rs[b][0], Rs[b][1], nt);
                    CHECK(ok);
                    if (!ok) fprintf(stderr, "  K=%d rows [%d, %d) tokens %lld extreme %d\n", (int)K,
                                     (int)Rs[b][0], (int)Rs[b][1], (long long)nt, extreme);
                }
        }
        munmap(g.map, g.map_bytes);
    }
}

/* Around the AMX limit on K (16384: larger K goes to the AVX-512 kernel), with extreme codes. */
static void long_rows(unsigned *s) {
    for (int32_t K = 16383; K <= 16385; K++) {
        guarded g = guarded_alloc((size_t)33 * (size_t)K);
        CHECK(g.map != NULL);
        if (!g.map) return;
        fill(s, g.w, (size_t)33 * (size_t)K, 1);
        for (int t = 0; t < 17; t++)
            for (int32_t k = 0; k < K; k++) xq_buf[t][k] = (int16_t)(k % 3 ? 127 : -127);
        cb_matrix m = {g.w, scales, NULL, CB_I8_ROW, 33, K};
        CHECK(same_as_scalar(&m, 0, 33, 17));
        CHECK(same_as_scalar(&m, 1, 33, 2));
        munmap(g.map, g.map_bytes);
    }
}

typedef struct { const cb_matrix *m; const int16_t *const *xs; float *const *outs; } job;

static void *run_job(void *p) {
    job *j = p;
    for (int rep = 0; rep < 20; rep++) cb_dot_rows_q8(j->m, 0, j->m->rows, j->xs, sx, j->outs, 16);
    return NULL;
}

/* Two threads at once on their own outputs: same bits as one thread alone. */
static void two_threads(unsigned *s) {
    enum { R = 64, K = 200 };
    static int8_t w[R * K];
    static float o1[16][R], o2[16][R], ref[16][R];
    fill(s, w, sizeof w, 0);
    cb_matrix m = {w, scales, NULL, CB_I8_ROW, R, K};
    const int16_t *xs[16];
    float *p1[16], *p2[16], *pr[16];
    for (int t = 0; t < 16; t++) xs[t] = xq_buf[t], p1[t] = o1[t], p2[t] = o2[t], pr[t] = ref[t];
    cb_dot_rows_q8_scalar(&m, 0, R, xs, sx, pr, 16);
    job a = {&m, xs, p1}, b = {&m, xs, p2};
    pthread_t ta, tb;
    CHECK(pthread_create(&ta, NULL, run_job, &a) == 0);
    CHECK(pthread_create(&tb, NULL, run_job, &b) == 0);
    pthread_join(ta, NULL), pthread_join(tb, NULL);
    CHECK(memcmp(o1, ref, sizeof ref) == 0 && memcmp(o2, ref, sizeof ref) == 0);
}

int main(void) {
    printf("simd level %s\n", cb_simd_name());
    unsigned s = 7;
    for (int t = 0; t < MAX_T; t++) sx[t] = (rnd(&s) + 1.5f) * 0.01f;
    for (int r = 0; r < 128; r++) scales[r] = (rnd(&s) + 1.5f) * 0.003f;
    odd_shapes(&s);
    long_rows(&s);
    two_threads(&s);
    CHECK_DONE();
}
