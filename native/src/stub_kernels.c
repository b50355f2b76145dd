/* TEMPORARY link stubs for the kernel API; deleted as native/src/*.c implement them. */
#include "colibri.h"
const char *cb_status_str(cb_status s) { (void)s; return "unimplemented"; }
const char *cb_last_error(void) { return "unimplemented"; }
int cb_simd_level(void) { return 0; }
const char *cb_simd_name(void) { return "scalar"; }
cb_status cb_arena_create(size_t c, cb_arena **o) { (void)c; *o = 0; return CB_E_UNSUPPORTED; }
void *cb_arena_alloc(cb_arena *a, size_t b) { (void)a; (void)b; return 0; }
void cb_arena_reset(cb_arena *a) { (void)a; }
size_t cb_arena_used(const cb_arena *a) { (void)a; return 0; }
size_t cb_arena_high_water(const cb_arena *a) { (void)a; return 0; }
size_t cb_arena_capacity(const cb_arena *a) { (void)a; return 0; }
void cb_arena_destroy(cb_arena *a) { (void)a; }
cb_status cb_engine_create(int32_t n, const int32_t *c, int32_t nc, cb_engine **o) { (void)n; (void)c; (void)nc; *o = 0; return CB_E_UNSUPPORTED; }
void cb_engine_destroy(cb_engine *e) { (void)e; }
const char *cb_engine_last_error(const cb_engine *e) { (void)e; return "unimplemented"; }
int32_t cb_engine_threads(const cb_engine *e) { (void)e; return 0; }
size_t cb_engine_arena_high_water(const cb_engine *e) { (void)e; return 0; }
uint64_t cb_engine_mallocs(const cb_engine *e) { (void)e; return 0; }
cb_status cb_route(cb_engine *e, const cb_gating *g, const float *r, const float *b, const float *x, int64_t n, int32_t h, int32_t *i, float *w) { (void)e; (void)g; (void)r; (void)b; (void)x; (void)n; (void)h; (void)i; (void)w; return CB_E_UNSUPPORTED; }
cb_status cb_expert_forward(cb_engine *e, const cb_expert *ex, const float *x, int32_t h, const int32_t *r, int64_t n, float *o) { (void)e; (void)ex; (void)x; (void)h; (void)r; (void)n; (void)o; return CB_E_UNSUPPORTED; }
cb_status cb_shared_forward(cb_engine *e, const cb_expert *s, const float *g, const float *x, int64_t n, int32_t h, float *o) { (void)e; (void)s; (void)g; (void)x; (void)n; (void)h; (void)o; return CB_E_UNSUPPORTED; }
cb_status cb_combine(int64_t n, int32_t k, int32_t h, const float *w, const float *s, const float *sh, float *y) { (void)n; (void)k; (void)h; (void)w; (void)s; (void)sh; (void)y; return CB_E_UNSUPPORTED; }
cb_status cb_moe_forward(cb_engine *e, const cb_moe_layer *l, const float *x, int64_t n, float *y, int32_t *i, float *w) { (void)e; (void)l; (void)x; (void)n; (void)y; (void)i; (void)w; return CB_E_UNSUPPORTED; }
