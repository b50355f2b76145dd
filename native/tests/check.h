/* check.h — minimal assertion helpers for the C unit tests (no framework). */
#ifndef CB_CHECK_H
#define CB_CHECK_H
#include <stdio.h>
#include <stdlib.h>
static int check_failures = 0;
#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);  \
            check_failures++;                                                         \
        }                                                                             \
    } while (0)
#define CHECK_OK(expr) CHECK((expr) == CB_OK)
#define CHECK_DONE()                                                                  \
    do {                                                                              \
        if (check_failures) { fprintf(stderr, "%d check(s) failed\n", check_failures); return 1; } \
        printf("ok\n");                                                               \
        return 0;                                                                     \
    } while (0)
/* Deterministic pseudo-random floats in [-1, 1). */
static float rnd(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffffff) / 8388608.0f - 1.0f;
}
#endif
