/* Arena: alignment, exhaustion, reset, high-water. */
#include <stdint.h>
#include "colibri.h"
#include "check.h"

int main(void) {
    cb_arena *a = NULL;
    CHECK_OK(cb_arena_create(1000, &a));
    CHECK(cb_arena_capacity(a) >= 1000 && cb_arena_capacity(a) % 64 == 0);
    void *p = cb_arena_alloc(a, 1), *q = cb_arena_alloc(a, 100);
    CHECK(p && q && ((uintptr_t)p % 64) == 0 && ((uintptr_t)q % 64) == 0);
    CHECK((char *)q - (char *)p == 64);
    CHECK(cb_arena_used(a) == 64 + 128);
    CHECK(cb_arena_alloc(a, 5000) == NULL);            /* exhausted: NULL, state unchanged */
    CHECK(cb_arena_used(a) == 192);
    cb_arena_reset(a);
    CHECK(cb_arena_used(a) == 0 && cb_arena_high_water(a) == 192);
    void *r = cb_arena_alloc(a, 10);
    CHECK(r == p);                                     /* reuse after reset */
    CHECK(cb_arena_alloc(a, (size_t)-1) == NULL);      /* overflow-safe */
    cb_arena_destroy(a);
    cb_arena_destroy(NULL);
    CHECK(cb_arena_create(10, NULL) == CB_E_INVALID);
    CHECK_DONE();
}
