/* numa.c — NUMA memory policy and CPU pinning through raw Linux syscalls.
 *
 * Role in the data flow: a pool worker pins itself (cb_pin_thread) and sets
 * its memory policy (cb_numa_set_policy) once at start-up; the expert store
 * binds each cache buffer to the worker's node (cb_numa_bind) before first
 * touch. No libnuma: mbind/set_mempolicy go through syscall(2).
 *
 * Failures return CB_E_INVALID (bad argument) or CB_E_SYS (the kernel said
 * no); errno is left as the failing syscall set it, so callers (cffi's
 * ffi.errno) can tell EPERM from ENOSYS from EINVAL. The message goes to the
 * thread-local cb_last_error() (cb_fail, status.c). Non-Linux builds return
 * CB_E_UNSUPPORTED.
 */
#include "cb_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define CB_NUMA_MAX_NODES 1024   /* nodemask bits passed to the kernel */
#define CB_MAX_CPUS (1 << 16)

/* Record the message for cb_last_error() without disturbing errno; return the status. */
static cb_status numa_fail(cb_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static cb_status numa_fail(cb_status status, const char *fmt, ...)
{
    int saved = errno;
    char message[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    cb_fail(status, "%s", message);
    errno = saved;
    return status;
}

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Kernel policy numbers (include/uapi/linux/mempolicy.h). */
enum { K_MPOL_DEFAULT = 0, K_MPOL_PREFERRED = 1, K_MPOL_BIND = 2, K_MPOL_INTERLEAVE = 3 };
#define K_MPOL_MF_MOVE (1u << 1)

#define MASK_WORDS (CB_NUMA_MAX_NODES / (8 * sizeof(unsigned long)))

typedef struct {
    int kernel_mode;
    unsigned long mask[MASK_WORDS];
    unsigned long maxnode;  /* bits + 1: the kernel drops one (historic ABI) */
    int use_mask;
} numa_request;

static cb_status build_request(int32_t policy, const int32_t *nodes, int32_t n_nodes,
                               numa_request *rq, const char *who)
{
    memset(rq, 0, sizeof *rq);
    switch (policy) {
    case CB_MPOL_NONE: rq->kernel_mode = K_MPOL_DEFAULT; return CB_OK;
    case CB_MPOL_BIND: rq->kernel_mode = K_MPOL_BIND; break;
    case CB_MPOL_INTERLEAVE: rq->kernel_mode = K_MPOL_INTERLEAVE; break;
    case CB_MPOL_PREFERRED: rq->kernel_mode = K_MPOL_PREFERRED; break;
    default:
        return numa_fail(CB_E_INVALID, "%s: unknown memory policy %d (0 none, 1 bind, 2 interleave, 3 preferred)",
                         who, (int)policy);
    }
    if (nodes == NULL || n_nodes <= 0)
        return numa_fail(CB_E_INVALID, "%s: policy %d needs at least one node", who, (int)policy);
    if (policy == CB_MPOL_PREFERRED && n_nodes != 1)
        return numa_fail(CB_E_INVALID, "%s: preferred policy takes exactly one node, got %d", who, (int)n_nodes);
    const size_t word_bits = 8 * sizeof(unsigned long);
    for (int32_t i = 0; i < n_nodes; i++) {
        int32_t node = nodes[i];
        if (node < 0 || node >= CB_NUMA_MAX_NODES)
            return numa_fail(CB_E_INVALID, "%s: node %d out of range [0, %d)", who, (int)node, CB_NUMA_MAX_NODES);
        rq->mask[node / word_bits] |= 1ul << (node % word_bits);
    }
    rq->maxnode = CB_NUMA_MAX_NODES + 1;
    rq->use_mask = 1;
    return CB_OK;
}

cb_status cb_numa_bind(void *addr, size_t len, int32_t policy, const int32_t *nodes, int32_t n_nodes)
{
    numa_request rq;
    if (addr == NULL || len == 0)
        return numa_fail(CB_E_INVALID, "cb_numa_bind: empty range (addr %p, len %zu)", addr, len);
    cb_status st = build_request(policy, nodes, n_nodes, &rq, "cb_numa_bind");
    if (st != CB_OK) return st;
    /* mbind works on whole pages: widen the range to the enclosing pages. */
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0) page = 4096;
    uintptr_t start = (uintptr_t)addr & ~((uintptr_t)page - 1);
    uintptr_t end = ((uintptr_t)addr + len + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    long rc = syscall(SYS_mbind, (void *)start, (unsigned long)(end - start), rq.kernel_mode,
                      rq.use_mask ? rq.mask : NULL, rq.use_mask ? rq.maxnode : 0ul,
                      rq.kernel_mode == K_MPOL_DEFAULT ? 0u : K_MPOL_MF_MOVE);
    if (rc != 0)
        return numa_fail(CB_E_SYS, "cb_numa_bind: mbind(%p, %zu, mode %d) failed: %s",
                         (void *)start, (size_t)(end - start), rq.kernel_mode, strerror(errno));
    return CB_OK;
}

cb_status cb_numa_set_policy(int32_t policy, const int32_t *nodes, int32_t n_nodes)
{
    numa_request rq;
    cb_status st = build_request(policy, nodes, n_nodes, &rq, "cb_numa_set_policy");
    if (st != CB_OK) return st;
    long rc = syscall(SYS_set_mempolicy, rq.kernel_mode, rq.use_mask ? rq.mask : NULL,
                      rq.use_mask ? rq.maxnode : 0ul);
    if (rc != 0)
        return numa_fail(CB_E_SYS, "cb_numa_set_policy: set_mempolicy(mode %d) failed: %s",
                         rq.kernel_mode, strerror(errno));
    return CB_OK;
}

cb_status cb_pin_thread(const int32_t *cpus, int32_t n_cpus)
{
    if (cpus == NULL || n_cpus <= 0)
        return numa_fail(CB_E_INVALID, "cb_pin_thread: empty CPU list");
    int32_t max_cpu = 0;
    for (int32_t i = 0; i < n_cpus; i++) {
        if (cpus[i] < 0 || cpus[i] >= CB_MAX_CPUS)
            return numa_fail(CB_E_INVALID, "cb_pin_thread: CPU %d out of range [0, %d)", (int)cpus[i], CB_MAX_CPUS);
        if (cpus[i] > max_cpu) max_cpu = cpus[i];
    }
    cpu_set_t *set = CPU_ALLOC(max_cpu + 1);
    if (set == NULL) return numa_fail(CB_E_NOMEM, "cb_pin_thread: CPU_ALLOC(%d) failed", (int)max_cpu + 1);
    size_t size = CPU_ALLOC_SIZE(max_cpu + 1);
    CPU_ZERO_S(size, set);
    for (int32_t i = 0; i < n_cpus; i++) CPU_SET_S(cpus[i], size, set);
    int rc = pthread_setaffinity_np(pthread_self(), size, set);
    CPU_FREE(set);
    if (rc != 0) {
        errno = rc;
        return numa_fail(CB_E_SYS, "cb_pin_thread: pthread_setaffinity_np(%d CPUs, max %d) failed: %s",
                         (int)n_cpus, (int)max_cpu, strerror(rc));
    }
    return CB_OK;
}

#else /* not Linux */

cb_status cb_numa_bind(void *addr, size_t len, int32_t policy, const int32_t *nodes, int32_t n_nodes)
{
    (void)addr; (void)len; (void)policy; (void)nodes; (void)n_nodes;
    return numa_fail(CB_E_UNSUPPORTED, "cb_numa_bind: NUMA binding needs Linux");
}

cb_status cb_numa_set_policy(int32_t policy, const int32_t *nodes, int32_t n_nodes)
{
    (void)policy; (void)nodes; (void)n_nodes;
    return numa_fail(CB_E_UNSUPPORTED, "cb_numa_set_policy: NUMA policy needs Linux");
}

cb_status cb_pin_thread(const int32_t *cpus, int32_t n_cpus)
{
    (void)cpus; (void)n_cpus;
    return numa_fail(CB_E_UNSUPPORTED, "cb_pin_thread: thread pinning needs Linux");
}

#endif
