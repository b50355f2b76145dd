/* TEMPORARY link stubs for the NUMA API; deleted when native/src/numa.c lands. */
#include "colibri.h"
cb_status cb_numa_bind(void *a, size_t l, int32_t p, const int32_t *n, int32_t c) { (void)a; (void)l; (void)p; (void)n; (void)c; return CB_E_UNSUPPORTED; }
cb_status cb_numa_set_policy(int32_t p, const int32_t *n, int32_t c) { (void)p; (void)n; (void)c; return CB_E_UNSUPPORTED; }
cb_status cb_pin_thread(const int32_t *c, int32_t n) { (void)c; (void)n; return CB_E_UNSUPPORTED; }
