/* NUMA: argument checks, mbind of a real buffer to node 0 (visible in numa_maps),
 * set_mempolicy failure for an absent node, pinning the calling thread. Linux only. */
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include "colibri.h"
#include "check.h"

/* The numa_maps line of the mapping starting at addr, or "" */
static void numa_maps_line(void *addr, char *out, size_t n) {
    char want[32], line[1024];
    snprintf(want, sizeof want, "%lx ", (unsigned long)(uintptr_t)addr);
    out[0] = '\0';
    FILE *f = fopen("/proc/self/numa_maps", "r");
    if (!f) return;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, want, strlen(want)) == 0) { snprintf(out, n, "%s", line); break; }
    fclose(f);
}

int main(void) {
    int32_t node0 = 0, far_node = 1000, bad_node = -1, cpu0 = 0, bad_cpu = -3;
    size_t len = 1 << 20;
    char *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(buf != MAP_FAILED);

    /* invalid arguments never reach the kernel */
    CHECK(cb_numa_bind(NULL, len, CB_MPOL_BIND, &node0, 1) == CB_E_INVALID);
    CHECK(cb_numa_bind(buf, 0, CB_MPOL_BIND, &node0, 1) == CB_E_INVALID);
    CHECK(cb_numa_bind(buf, len, 42, &node0, 1) == CB_E_INVALID);
    CHECK(cb_numa_bind(buf, len, CB_MPOL_BIND, NULL, 0) == CB_E_INVALID);
    CHECK(cb_numa_bind(buf, len, CB_MPOL_BIND, &bad_node, 1) == CB_E_INVALID);
    CHECK(strstr(cb_last_error(), "node -1") != NULL);
    CHECK(cb_pin_thread(NULL, 0) == CB_E_INVALID);
    CHECK(cb_pin_thread(&bad_cpu, 1) == CB_E_INVALID);

    /* bind to node 0 (exists on every Linux machine): OK, or a clean CB_E_SYS if the sandbox forbids mbind */
    cb_status st = cb_numa_bind(buf + 100, len - 200, CB_MPOL_BIND, &node0, 1);  /* widened to pages */
    CHECK(st == CB_OK || st == CB_E_SYS);
    if (st == CB_OK) {
        memset(buf, 1, len);
        char line[1024];
        numa_maps_line(buf, line, sizeof line);
        CHECK(strstr(line, " bind:0 ") != NULL);
        CHECK(strstr(line, "N0=256") != NULL);
        CHECK_OK(cb_numa_bind(buf, len, CB_MPOL_NONE, NULL, 0));  /* back to default */
    }
    /* a node this machine does not have: the kernel says EINVAL, errno kept for the caller */
    errno = 0;
    CHECK(cb_numa_set_policy(CB_MPOL_BIND, &far_node, 1) == CB_E_SYS);
    CHECK(errno == EINVAL);
    CHECK(strstr(cb_last_error(), "set_mempolicy") != NULL);
    CHECK_OK(cb_numa_set_policy(CB_MPOL_NONE, NULL, 0));

    /* pin the calling thread to CPU 0 and read it back */
    CHECK_OK(cb_pin_thread(&cpu0, 1));
    cpu_set_t set;
    CPU_ZERO(&set);
    CHECK(sched_getaffinity(0, sizeof set, &set) == 0);
    CHECK(CPU_COUNT(&set) == 1 && CPU_ISSET(0, &set));
    munmap(buf, len);
    CHECK_DONE();
}
