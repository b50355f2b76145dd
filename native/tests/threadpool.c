/* The thread pool: every item of every region runs exactly once and the caller returns only after
 * all of them, for 1-4 threads, with regions back to back (workers still spinning), regions 1 ms
 * apart (workers asleep on the condition variable: longer than the pool's spin), regions of 0, 1 and
 * many items, and destruction with the workers spinning or asleep. */
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include "threadpool.h"
#include "check.h"

enum { MAX_ITEMS = 4096 };

typedef struct {
    atomic_int runs[MAX_ITEMS];
    atomic_int total;
} counts;

static void count_item(void *ctx, int64_t item) {
    counts *c = ctx;
    atomic_fetch_add(&c->runs[item], 1);
    atomic_fetch_add(&c->total, 1);
}

static void sleep_us(long us) {
    struct timespec t = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&t, NULL);
}

/* One region of n items: each ran once, and all had run when cb_pool_run returned. */
static void region(cb_pool *p, counts *c, int64_t n) {
    memset(c, 0, sizeof *c);
    cb_pool_run(p, count_item, c, n);
    int once = 1;
    for (int64_t i = 0; i < n; i++) once &= atomic_load(&c->runs[i]) == 1;
    CHECK(once);
    CHECK(atomic_load(&c->total) == (int)n);
}

int main(void) {
    static counts c;
    const int64_t sizes[] = {0, 1, 2, 3, 17, 1000, MAX_ITEMS};
    for (int32_t threads = 1; threads <= 4; threads++) {
        cb_pool *p = NULL;
        CHECK(cb_pool_create(threads, NULL, 0, &p) == 0 && p);
        if (!p) continue;
        CHECK(cb_pool_threads(p) == threads);
        for (int rep = 0; rep < 300; rep++) region(p, &c, sizes[rep % 7]);         /* back to back */
        for (int rep = 0; rep < 14; rep++) {                                      /* workers asleep */
            sleep_us(1000);
            region(p, &c, sizes[rep % 7]);
        }
        cb_pool_destroy(p);                                                       /* just ran: spinning */
        CHECK(cb_pool_create(threads, NULL, 0, &p) == 0 && p);
        if (p) {
            region(p, &c, 64);
            sleep_us(2000);
            cb_pool_destroy(p);                                                   /* asleep */
        }
    }
    CHECK_DONE();
}
