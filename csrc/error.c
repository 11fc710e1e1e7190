// error.c — the thread-local error message behind llmb_last_error().
// Tested through every failing call in csrc/tests and tests/.
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

static _Thread_local char errbuf[1024];
static _Thread_local int errnum;

static void vset(const char *fmt, va_list ap) {
    vsnprintf(errbuf, sizeof errbuf, fmt, ap);
}

llmb_status llmb_fail(llmb_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vset(fmt, ap);
    va_end(ap);
    errnum = 0;
    return s;
}

llmb_status llmb_fail_errno(int err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vset(fmt, ap);
    va_end(ap);
    errnum = err;
    return err == ENOMEM ? LLMB_E_NOMEM : LLMB_E_IO;
}

void llmb_clear_error(void) {
    errbuf[0] = '\0';
    errnum = 0;
}

const char *llmb_last_error(void) { return errbuf; }
int llmb_last_errno(void) { return errnum; }

const char *llmb_status_name(llmb_status s) {
    switch (s) {
    case LLMB_OK: return "ok";
    case LLMB_E_IO: return "io";
    case LLMB_E_FORMAT: return "format";
    case LLMB_E_NOMEM: return "nomem";
    case LLMB_E_ARG: return "arg";
    case LLMB_E_BACKEND: return "backend";
    case LLMB_E_DEVICE: return "device";
    case LLMB_E_DEVICE_OOM: return "device_oom";
    case LLMB_E_NOTFOUND: return "notfound";
    case LLMB_E_UNSUPPORTED: return "unsupported";
    }
    return "unknown";
}
