#include "common/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"

static _Atomic int current_level = LOG_LEVEL_INFO;
static char log_prefix[64] = "ddp";

static const char *const level_names[] = {"error", "warn", "info", "debug"};
static const int syslog_priority[] = {3, 4, 6, 7}; /* LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG */

void log_set_level(log_level level) {
    atomic_store(&current_level, (int)level);
}

log_level log_get_level(void) {
    return (log_level)atomic_load(&current_level);
}

int log_level_from_string(const char *name, log_level *ret_level) {
    for (int i = 0; i < 4; i++)
        if (strcmp(name, level_names[i]) == 0) {
            *ret_level = (log_level)i;
            return 0;
        }
    return -EINVAL;
}

static void (*log_sink)(void *ctx, const char *line, size_t n);
static void *log_sink_ctx;

void log_set_sink(void (*sink)(void *ctx, const char *line, size_t n), void *ctx) {
    log_sink = sink;
    log_sink_ctx = ctx;
}

void log_set_prefix(const char *prefix) {
    snprintf(log_prefix, sizeof(log_prefix), "%s", prefix);
}

static void log_vwrite(log_level level, const char *fmt, va_list ap) {
    char line[2048];
    int n;
    if (getenv("JOURNAL_STREAM"))
        n = snprintf(line, sizeof(line), "<%d>%s: ", syslog_priority[level], log_prefix);
    else
        n = snprintf(line, sizeof(line), "%s: %s: ", log_prefix, level_names[level]);
    if (n < 0 || (size_t)n >= sizeof(line))
        return;
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    if (m < 0)
        return;
    size_t len = (size_t)n + ((size_t)m < sizeof(line) - (size_t)n - 1 ? (size_t)m : sizeof(line) - (size_t)n - 2);
    /* A log line is one line: peer-controlled text must not forge others. */
    for (size_t i = (size_t)n; i < len; i++)
        if (line[i] == '\n' || line[i] == '\r' || (unsigned char)line[i] < 0x20)
            line[i] = ' ';
    line[len++] = '\n';
    if (log_sink) {
        log_sink(log_sink_ctx, line, len);
        return;
    }
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}

void log_write(log_level level, const char *fmt, ...) {
    if ((int)level > atomic_load(&current_level))
        return;
    va_list ap;
    va_start(ap, fmt);
    log_vwrite(level, fmt, ap);
    va_end(ap);
}

void log_ratelimited(log_ratelimit *rl, log_level level, const char *fmt, ...) {
    if ((int)level > atomic_load(&current_level))
        return;
    uint64_t now = clock_now_ms();
    if (now - rl->window_start_ms >= rl->interval_ms) {
        if (rl->suppressed)
            log_write(level, "(%u similar messages suppressed)", rl->suppressed);
        rl->window_start_ms = now;
        rl->printed = 0;
        rl->suppressed = 0;
    }
    if (rl->printed >= rl->burst) {
        rl->suppressed++;
        return;
    }
    rl->printed++;
    va_list ap;
    va_start(ap, fmt);
    log_vwrite(level, fmt, ap);
    va_end(ap);
}
