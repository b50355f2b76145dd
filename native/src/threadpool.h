/* threadpool.h — a small pthread pool that runs `fn(ctx, item)` over items.
 *
 * Role: the engine's only source of parallelism. Items are handed out from an
 * atomic counter, so which thread runs an item varies; kernels therefore make
 * every item's result independent of the thread (threads split output rows).
 * The calling thread works too; `n_threads` counts it.
 */
#ifndef CB_THREADPOOL_H
#define CB_THREADPOOL_H
#include <stdint.h>

typedef struct cb_pool cb_pool;
typedef void (*cb_pool_fn)(void *ctx, int64_t item);

/* cpus may be NULL; worker i (1..n-1) is pinned to cpus[i % n_cpus], the caller is not pinned. */
int cb_pool_create(int32_t n_threads, const int32_t *cpus, int32_t n_cpus, cb_pool **out);
void cb_pool_destroy(cb_pool *p);
int32_t cb_pool_threads(const cb_pool *p);
/* Runs fn for items 0..n_items-1 and returns when all are done. */
void cb_pool_run(cb_pool *p, cb_pool_fn fn, void *ctx, int64_t n_items);
#endif
