/* status.c — status strings and the thread-local last-error message.
 *
 * Role: every fallible call in the core reports through cb_fail(), which keeps
 * a formatted message per thread; engine calls copy it into their handle.
 */
#include <stdarg.h>
#include <stdio.h>
#include "cb_internal.h"

static _Thread_local char tls_error[256];

const char *cb_status_str(cb_status s) {
    switch (s) {
    case CB_OK: return "ok";
    case CB_E_INVALID: return "invalid argument";
    case CB_E_NOMEM: return "out of memory";
    case CB_E_IO: return "i/o error";
    case CB_E_FORMAT: return "format error";
    case CB_E_UNSUPPORTED: return "unsupported";
    case CB_E_SYS: return "system call failed";
    case CB_E_NONFINITE: return "non-finite value";
    }
    return "unknown status";
}

const char *cb_last_error(void) { return tls_error; }

cb_status cb_fail(cb_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_error, sizeof tls_error, fmt, ap);
    va_end(ap);
    return s;
}
