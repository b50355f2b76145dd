/* engine.c — the engine handle: a thread pool plus one reusable scratch arena.
 *
 * Role: owns the resources of the forward path. Every engine call sizes the
 * arena first (cb_engine_scratch); the arena is only reallocated when a call
 * needs more bytes than any call before, so after warm-up the forward path
 * performs no allocation (cb_engine_mallocs stays flat).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <unistd.h>
#include "cb_internal.h"

/* 1 if the process may run on `cpu` (Linux affinity mask), else 0. */
static int cpu_allowed(int32_t cpu) {
#ifdef __linux__
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
    return cpu < CPU_SETSIZE && CPU_ISSET(cpu, &set);
#else
    (void)cpu;
    return 1;
#endif
}

static int32_t online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int32_t)n : 1;
}

cb_status cb_engine_create(int32_t n_threads, const int32_t *cpus, int32_t n_cpus, cb_engine **out) {
    if (!out) return cb_fail(CB_E_INVALID, "cb_engine_create: out is NULL");
    *out = NULL;
    if (n_threads < 0 || n_threads > 1024)
        return cb_fail(CB_E_INVALID, "cb_engine_create: n_threads %d outside 0..1024", (int)n_threads);
    if (n_cpus < 0 || (n_cpus > 0 && !cpus))
        return cb_fail(CB_E_INVALID, "cb_engine_create: bad cpu list (n_cpus %d)", (int)n_cpus);
    for (int32_t i = 0; i < n_cpus; i++)
        if (cpus[i] < 0 || cpus[i] >= 1024 || !cpu_allowed(cpus[i]))
            return cb_fail(CB_E_INVALID, "cb_engine_create: cpu %d out of range or not in this process's affinity mask",
                           (int)cpus[i]);
    if (n_threads == 0) n_threads = n_cpus > 0 ? n_cpus : online_cpus();
    cb_engine *e = calloc(1, sizeof *e);
    if (!e) return cb_fail(CB_E_NOMEM, "cb_engine_create: no memory");
    cb_status s = cb_arena_create(1 << 16, &e->arena);
    if (s != CB_OK) { free(e); return s; }
    e->mallocs = 1;
    if (cb_pool_create(n_threads, cpus, n_cpus, &e->pool) != 0) {
        cb_arena_destroy(e->arena);
        free(e);
        return cb_fail(CB_E_SYS, "cb_engine_create: cannot start %d threads", (int)n_threads);
    }
    *out = e;
    return CB_OK;
}

void cb_engine_destroy(cb_engine *e) {
    if (!e) return;
    cb_pool_destroy(e->pool);
    cb_arena_destroy(e->arena);
    free(e->layer_buf);
    free(e);
}

const char *cb_engine_last_error(const cb_engine *e) { return e ? e->last_error : cb_last_error(); }
int32_t cb_engine_threads(const cb_engine *e) { return e ? cb_pool_threads(e->pool) : 0; }
size_t cb_engine_arena_high_water(const cb_engine *e) { return e ? cb_arena_high_water(e->arena) : 0; }
uint64_t cb_engine_mallocs(const cb_engine *e) { return e ? e->mallocs : 0; }

cb_status cb_engine_set_w8a8(cb_engine *e, int32_t on) {
    if (!e) return cb_fail(CB_E_INVALID, "cb_engine_set_w8a8: engine is NULL");
    e->w8a8 = on ? 1 : 0;
    return CB_OK;
}

cb_status cb_engine_fail(cb_engine *e, cb_status s) {
    if (e) snprintf(e->last_error, sizeof e->last_error, "%s", cb_last_error());
    return s;
}

cb_status cb_engine_scratch(cb_engine *e, size_t bytes) {
    if (bytes > cb_arena_capacity(e->arena)) {
        size_t cap = cb_arena_capacity(e->arena) * 2;
        if (cap < bytes) cap = bytes;
        cb_arena *fresh = NULL;
        cb_status s = cb_arena_create(cap, &fresh);
        if (s != CB_OK) return cb_fail(CB_E_NOMEM, "engine scratch: cannot allocate %zu bytes", cap);
        cb_arena_destroy(e->arena);
        e->arena = fresh;
        e->mallocs++;
    }
    cb_arena_reset(e->arena);
    return CB_OK;
}
