/* Logging to stderr, so that journald (or the terminal) collects it.
 *
 * One line per event: "ddpd: warn: job 'x': rank 2 (pid 42 on lab1) died".
 * Under systemd (JOURNAL_STREAM set) each line starts with the syslog priority, "<4>",
 * so journalctl shows levels. Thread-safe: each line is one write(2), or, after
 * log_never_wait, where stderr is a socket (the journal's stream), sent without waiting. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    LOG_LEVEL_ERROR = 0,
    LOG_LEVEL_WARN = 1,
    LOG_LEVEL_INFO = 2,
    LOG_LEVEL_DEBUG = 3,
} log_level;

void log_set_level(log_level level);
log_level log_get_level(void);
/* "error", "warn", "info", "debug" -> level; -EINVAL for anything else. */
int log_level_from_string(const char *name, log_level *ret_level);

/* The component or rank that prefixes every line: "ddpd", "rank 3". */
void log_set_prefix(const char *prefix);

/* Where lines go instead of stderr (NULL: stderr again), for a program whose loop must
 * never block on its own output (ddp-run queues them with its ranks' lines). */
void log_set_sink(void (*sink)(void *ctx, const char *line, size_t n), void *ctx);

void log_write(log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* From now on a stderr socket gets lines without waiting: a journal that does not read
 * costs lines (counted, and said once it reads again), never a stalled caller. For a
 * program that writes nothing else to stderr (ddpd), whose loop must go on. */
void log_never_wait(void);
/* At exit: waits up to timeout_ms for a stderr socket to take the rest of a line it did
 * not take, and the count of those dropped; -EAGAIN if some of it is still there. */
int log_flush(int timeout_ms);

#define log_error(...) log_write(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...) log_write(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...) log_write(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...) log_write(LOG_LEVEL_DEBUG, __VA_ARGS__)

/* At most `burst` lines per `interval_ms`; the next line that passes says how many were
 * suppressed. For anything a peer can trigger at will. Not thread-safe: one per thread. */
typedef struct {
    uint64_t interval_ms;
    unsigned burst;
    uint64_t window_start_ms;
    unsigned printed;
    unsigned suppressed;
} log_ratelimit;

#define LOG_RATELIMIT_INIT(interval, n)                                                                                \
    { .interval_ms = (interval), .burst = (n) }

void log_ratelimited(log_ratelimit *rl, log_level level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
