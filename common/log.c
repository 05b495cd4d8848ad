#include "common/log.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
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

#define LOG_LINE_MAX 2048

/* Once a program has said so (log_never_wait), a stderr that is a socket (journald's
 * stream: systemd's StandardError=journal) gets lines without waiting (MSG_DONTWAIT), so
 * that a journal that does not read (stalled, or flushing to a slow disk) never holds up
 * the program's loop. What the full socket did not take of a line waits for the next line,
 * which goes after it (lines are never cut into one another: the program writes nothing
 * to stderr but through here); whole lines that found it full are dropped, counted, and
 * the count is said as soon as the socket takes lines again. Else (a terminal, a file, a
 * pipe: ddp-run always reads ddpd's) each line is one write(2). */
static struct {
    pthread_mutex_t lock;
    bool never_wait;
    int is_socket; /* -1: not looked at yet */
    char tail[LOG_LINE_MAX + 256];
    size_t tail_len;
    unsigned long dropped;
} out = {PTHREAD_MUTEX_INITIALIZER, false, -1, "", 0, 0};

/* Sends as much of buf as the socket takes now. */
static size_t out_send(const char *buf, size_t n) {
    size_t sent = 0;
    while (sent < n) {
        ssize_t w = send(STDERR_FILENO, buf + sent, n - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0)
            sent += (size_t)w;
        else if (w < 0 && errno == EINTR)
            continue;
        else
            break; /* full (EAGAIN), or the journal gone: not this line's to say */
    }
    return sent;
}

/* The tail first, whole; true once nothing of it waits. */
static bool out_flush_tail(void) {
    size_t sent = out_send(out.tail, out.tail_len);
    memmove(out.tail, out.tail + sent, out.tail_len - sent);
    out.tail_len -= sent;
    return out.tail_len == 0;
}

/* buf, or what of it the socket did not take, kept as the tail; false if none of it went. */
static bool out_take(const char *buf, size_t n) {
    if (n == 0)
        return true;
    size_t sent = out_send(buf, n);
    if (sent == 0)
        return false;
    memcpy(out.tail, buf + sent, n - sent);
    out.tail_len = n - sent;
    return true;
}

/* line (n 0: none, only what waits), after the tail and the count of lines dropped. */
static void log_to_socket(const char *head, const char *line, size_t n) {
    unsigned long lost = n > 0; /* what this line adds to the count if it cannot go */
    if (!out_flush_tail()) {
        out.dropped += lost;
        return;
    }
    if (out.dropped) {
        char note[160];
        int k = snprintf(note, sizeof(note), "%s%lu log lines dropped: stderr (the journal) did not take them\n", head,
                         out.dropped);
        if (k < 0 || (size_t)k >= sizeof(note) || !out_take(note, (size_t)k)) {
            out.dropped += lost;
            return;
        }
        out.dropped = 0;
        if (out.tail_len) {
            out.dropped += lost;
            return;
        }
    }
    if (!out_take(line, n))
        out.dropped += lost;
}

/* The start of the line that says how many were dropped. */
static void note_head(char *buf, size_t size) {
    if (getenv("JOURNAL_STREAM"))
        snprintf(buf, size, "<%d>%s: ", syslog_priority[LOG_LEVEL_WARN], log_prefix);
    else
        snprintf(buf, size, "%s: %s: ", log_prefix, level_names[LOG_LEVEL_WARN]);
}

static void log_out(const char *line, size_t n) {
    char head[96];
    note_head(head, sizeof(head));
    pthread_mutex_lock(&out.lock);
    if (out.is_socket < 0 && out.never_wait) {
        struct stat st;
        out.is_socket = fstat(STDERR_FILENO, &st) == 0 && S_ISSOCK(st.st_mode);
    }
    bool is_socket = out.is_socket > 0;
    if (is_socket)
        log_to_socket(head, line, n);
    pthread_mutex_unlock(&out.lock);
    if (!is_socket) {
        ssize_t w = write(STDERR_FILENO, line, n);
        (void)w;
    }
}

void log_never_wait(void) {
    pthread_mutex_lock(&out.lock);
    out.never_wait = true;
    pthread_mutex_unlock(&out.lock);
}

int log_flush(int timeout_ms) {
    char head[96];
    note_head(head, sizeof(head));
    pthread_mutex_lock(&out.lock);
    for (int waited = 0; out.is_socket > 0; waited += 10) {
        log_to_socket(head, "", 0);
        if ((!out.tail_len && !out.dropped) || waited >= timeout_ms)
            break;
        struct pollfd p = {.fd = STDERR_FILENO, .events = POLLOUT};
        if (poll(&p, 1, 10) < 0 && errno != EINTR)
            break;
    }
    int r = out.is_socket > 0 && (out.tail_len || out.dropped) ? -EAGAIN : 0;
    pthread_mutex_unlock(&out.lock);
    return r;
}

static void log_vwrite(log_level level, const char *fmt, va_list ap) {
    char line[LOG_LINE_MAX];
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
    log_out(line, len);
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
