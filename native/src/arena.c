/* arena.c — 64-byte aligned bump allocator with a high-water mark.
 *
 * Role: all per-call scratch of the engine (routing logits, gathered row
 * lists, FFN intermediates, slot outputs) comes from one arena that is reset
 * at every call and only reallocated when a call needs more than ever before.
 */
#include <stdlib.h>
#include "cb_internal.h"

struct cb_arena {
    unsigned char *base;
    size_t capacity, used, high_water;
};

cb_status cb_arena_create(size_t capacity, cb_arena **out) {
    if (!out) return cb_fail(CB_E_INVALID, "cb_arena_create: out is NULL");
    *out = NULL;
    cb_arena *a = calloc(1, sizeof *a);
    if (!a) return cb_fail(CB_E_NOMEM, "cb_arena_create: no memory for the handle");
    size_t cap = cb_arena_need(capacity ? capacity : 64);
    a->base = aligned_alloc(64, cap);
    if (!a->base) {
        free(a);
        return cb_fail(CB_E_NOMEM, "cb_arena_create: cannot allocate %zu bytes", cap);
    }
    a->capacity = cap;
    *out = a;
    return CB_OK;
}

void *cb_arena_alloc(cb_arena *a, size_t bytes) {
    if (!a) return NULL;
    size_t need = cb_arena_need(bytes ? bytes : 1);
    if (need < bytes || need > a->capacity - a->used) return NULL;
    void *p = a->base + a->used;
    a->used += need;
    if (a->used > a->high_water) a->high_water = a->used;
    return p;
}

void cb_arena_reset(cb_arena *a) {
    if (a) a->used = 0;
}
size_t cb_arena_used(const cb_arena *a) { return a ? a->used : 0; }
size_t cb_arena_high_water(const cb_arena *a) { return a ? a->high_water : 0; }
size_t cb_arena_capacity(const cb_arena *a) { return a ? a->capacity : 0; }

void cb_arena_destroy(cb_arena *a) {
    if (!a) return;
    free(a->base);
    free(a);
}
