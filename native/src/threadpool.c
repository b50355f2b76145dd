/* threadpool.c — pthread pool: spin for a while, then sleep on a condition variable.
 *
 * Role: runs the engine's parallel regions (routing blocks, FFN row blocks,
 * combine blocks). A region is published by bumping a generation counter;
 * items are claimed from an atomic counter; the caller works and then waits
 * until every worker has left the region. Waiting spins for SPIN_NS first (a
 * decode step's regions come tens of microseconds apart, and a futex wake-up
 * costs about that much in a VM), and the condition variables are touched
 * only when somebody sleeps on them (sleepers / caller_sleeps, a Dekker pair
 * with the generation / pending counters: seq_cst on both sides).
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include "threadpool.h"

#define SPIN_NS 200000L     /* 200 us */

struct cb_pool {
    int32_t n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv_start, cv_done;
    atomic_ulong gen;
    atomic_int pending;
    atomic_llong next;
    atomic_int stop;
    atomic_int sleepers;       /* workers inside cond_wait(cv_start) (or about to be) */
    atomic_int caller_sleeps;  /* the caller inside cond_wait(cv_done) (or about to be) */
    cb_pool_fn fn;
    void *ctx;
    int64_t n_items;
    const int32_t *cpus;
    int32_t n_cpus;
};

typedef struct { cb_pool *p; int32_t id; } worker_arg;

static void drain(cb_pool *p) {
    int64_t i;
    while ((i = atomic_fetch_add(&p->next, 1)) < p->n_items) p->fn(p->ctx, i);
}

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long)t.tv_sec * 1000000000L + t.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Spins until done(p, arg) or SPIN_NS have passed; every 64 rounds it reads the clock and yields
 * (with more threads than cores the thread it waits for may need this core). 1 when done. */
static int spin_until(int (*done)(cb_pool *, unsigned long), cb_pool *p, unsigned long arg) {
    long until = 0;
    for (unsigned s = 0;; s++) {
        if (done(p, arg)) return 1;
        cpu_relax();
        if (s % 64 == 63) {
            sched_yield();
            long t = now_ns();
            if (!until) until = t + SPIN_NS;
            else if (t > until) return 0;
        }
    }
}

static int started(cb_pool *p, unsigned long seen) { return atomic_load(&p->gen) != seen || atomic_load(&p->stop); }
static int finished(cb_pool *p, unsigned long unused) { (void)unused; return atomic_load(&p->pending) <= 0; }

static unsigned long wait_generation(cb_pool *p, unsigned long seen) {
    if (spin_until(started, p, seen)) return atomic_load(&p->gen);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleepers, 1);
    while (!started(p, seen)) pthread_cond_wait(&p->cv_start, &p->mu);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->mu);
    return atomic_load(&p->gen);
}

static void pin_self(const int32_t *cpus, int32_t n_cpus, int32_t id) {
#ifdef __linux__
    if (!cpus || n_cpus <= 0) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpus[id % n_cpus], &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
#else
    (void)cpus; (void)n_cpus; (void)id;
#endif
}

static void *worker_main(void *arg) {
    worker_arg *wa = arg;
    cb_pool *p = wa->p;
    pin_self(p->cpus, p->n_cpus, wa->id);
    free(wa);
    unsigned long seen = 0;
    for (;;) {
        seen = wait_generation(p, seen);
        if (atomic_load(&p->stop)) break;
        drain(p);
        if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->caller_sleeps)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

int cb_pool_create(int32_t n_threads, const int32_t *cpus, int32_t n_cpus, cb_pool **out) {
    *out = NULL;
    if (n_threads < 1) n_threads = 1;
    cb_pool *p = calloc(1, sizeof *p);
    if (!p) return -1;
    p->n = n_threads;
    p->cpus = NULL;
    if (cpus && n_cpus > 0) {
        int32_t *copy = malloc(sizeof(int32_t) * (size_t)n_cpus);
        if (!copy) { free(p); return -1; }
        for (int32_t i = 0; i < n_cpus; i++) copy[i] = cpus[i];
        p->cpus = copy;
        p->n_cpus = n_cpus;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_start, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    p->threads = calloc((size_t)n_threads, sizeof(pthread_t));
    if (!p->threads) { cb_pool_destroy(p); return -1; }
    for (int32_t i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) { p->n = i; cb_pool_destroy(p); return -1; }
        wa->p = p;
        wa->id = i;
        if (pthread_create(&p->threads[i], NULL, worker_main, wa) != 0) {
            free(wa);
            p->n = i;
            cb_pool_destroy(p);
            return -1;
        }
    }
    *out = p;
    return 0;
}

void cb_pool_destroy(cb_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->cv_start);
    pthread_mutex_unlock(&p->mu);
    for (int32_t i = 1; i < p->n && p->threads; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_start);
    pthread_cond_destroy(&p->cv_done);
    free(p->threads);
    free((void *)p->cpus);
    free(p);
}

int32_t cb_pool_threads(const cb_pool *p) { return p ? p->n : 1; }

void cb_pool_run(cb_pool *p, cb_pool_fn fn, void *ctx, int64_t n_items) {
    if (n_items <= 0) return;
    if (!p || p->n == 1 || n_items == 1) {
        for (int64_t i = 0; i < n_items; i++) fn(ctx, i);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_items = n_items;
    atomic_store(&p->next, 0);
    atomic_store(&p->pending, p->n - 1);
    atomic_fetch_add(&p->gen, 1);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv_start);
        pthread_mutex_unlock(&p->mu);
    }
    drain(p);
    if (spin_until(finished, p, 0)) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->caller_sleeps, 1);
    while (!finished(p, 0)) pthread_cond_wait(&p->cv_done, &p->mu);
    atomic_store(&p->caller_sleeps, 0);
    pthread_mutex_unlock(&p->mu);
}
