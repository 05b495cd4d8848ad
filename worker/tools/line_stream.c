#include "worker/tools/line_stream.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"

#define DRAIN_MAX_BYTES (1u << 20) /* what an exited child left in its pipe, at most */

void line_stream_init(line_stream *s, int fd, int dest, out_queue *out, const char *prefix, bool quiet_info) {
    *s = (line_stream){.fd = fd, .dest = dest, .out = out, .quiet_info = quiet_info};
    snprintf(s->prefix, sizeof(s->prefix), "%s", prefix);
}

static bool starts_with(const char *s, size_t n, const char *prefix) {
    size_t plen = strlen(prefix);
    return n >= plen && memcmp(s, prefix, plen) == 0;
}

/* One line out, prefixed, whole: the queue writes one line before it begins the next. */
static void stream_line(line_stream *s, const char *line, size_t n) {
    if (s->watch)
        s->watch(s->watch_ctx, line, n);
    if (s->quiet_info && (starts_with(line, n, "ddpd: info: ") || starts_with(line, n, "ddpd: debug: ")))
        return;
    out_queue_put(s->out, s->dest, s->prefix, line, n);
}

/* Passes on every complete line in the buffer. A line the buffer cannot grow for (past
 * LINE_STREAM_MAX_BYTES) goes out in pieces of that size. */
static void stream_split(line_stream *s) {
    size_t start = 0;
    for (size_t i = s->scanned; i < s->len; i++)
        if (s->buf[i] == '\n') {
            if (!(s->cut && i == 0)) /* the newline that ends a line already sent in pieces */
                stream_line(s, s->buf + start, i - start);
            s->cut = false;
            start = i + 1;
        }
    if (start == 0 && s->len == s->cap && s->cap >= LINE_STREAM_MAX_BYTES) {
        stream_line(s, s->buf, s->len);
        s->cut = true;
        start = s->len;
    }
    memmove(s->buf, s->buf + start, s->len - start);
    s->len -= start;
    s->scanned = s->len; /* what is left has no newline */
    if (!s->len)
        s->held_since_ms = 0;
    else if (start || !s->held_since_ms) /* a new line began */
        s->held_since_ms = clock_now_ms();
}

uint64_t line_stream_due_ms(const line_stream *s) {
    return s->fd >= 0 && s->len ? s->held_since_ms + LINE_STREAM_HOLD_MS : UINT64_MAX;
}

void line_stream_flush_due(line_stream *s, uint64_t now_ms) {
    if (now_ms < line_stream_due_ms(s))
        return;
    stream_line(s, s->buf, s->len);
    s->cut = true;
    s->len = s->scanned = 0;
    s->held_since_ms = 0;
}

void line_stream_close(line_stream *s) {
    if (s->fd >= 0) {
        if (s->len > 0)
            stream_line(s, s->buf, s->len);
        close(s->fd);
        s->fd = -1;
    }
    free(s->buf);
    s->buf = NULL;
    s->len = s->cap = s->scanned = 0;
    s->held_since_ms = 0;
}

/* Room to read into: the buffer grows, doubling, up to LINE_STREAM_MAX_BYTES. */
static bool stream_room(line_stream *s) {
    if (s->len < s->cap)
        return true;
    size_t cap = s->cap ? s->cap * 2 : LINE_STREAM_BYTES;
    char *grown = cap <= LINE_STREAM_MAX_BYTES ? realloc(s->buf, cap) : NULL;
    if (!grown)
        return false;
    s->buf = grown;
    s->cap = cap;
    return true;
}

ssize_t line_stream_read(line_stream *s) {
    if (s->fd < 0)
        return 0;
    if (!stream_room(s)) { /* full at the limit, or out of memory: the piece goes out as a line */
        stream_line(s, s->buf, s->len);
        s->cut = true;
        s->len = s->scanned = 0;
        s->held_since_ms = 0;
        if (!stream_room(s))
            return -EAGAIN;
    }
    ssize_t n = read(s->fd, s->buf + s->len, s->cap - s->len);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return -EAGAIN;
    if (n <= 0) {
        line_stream_close(s);
        return 0;
    }
    s->len += (size_t)n;
    stream_split(s);
    return n;
}

void line_stream_drain(line_stream *s) {
    size_t total = 0;
    ssize_t n;
    while (total < DRAIN_MAX_BYTES && (n = line_stream_read(s)) > 0)
        total += (size_t)n;
    line_stream_close(s);
}
