/* A child's output for the launcher: one pipe, cut into lines that go out prefixed ("[rank
 * 3] ..."), whole, through the launcher's output queue, so that lines of different ranks
 * never interleave. A line is kept whole up to LINE_STREAM_MAX_BYTES; a longer one goes
 * out in pieces that long. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "worker/tools/out_queue.h"

#define LINE_STREAM_BYTES 8192           /* the buffer's first size */
#define LINE_STREAM_MAX_BYTES (1u << 20) /* and its last: a longer line goes out in pieces */

typedef struct {
    int fd;          /* read end, non-blocking; -1 once closed */
    int dest;        /* STDOUT_FILENO or STDERR_FILENO */
    out_queue *out;  /* where lines for dest go */
    bool quiet_info; /* ddpd's info and debug lines are dropped (not --verbose) */
    char prefix[24]; /* "[rank 3] " */
    /* Sees every line before it goes out (NULL: none): the launcher reads ddpd's port so. */
    void (*watch)(void *ctx, const char *line, size_t n);
    void *watch_ctx;
    char *buf; /* what came that is not a whole line yet; grown as needed */
    size_t len, cap;
    size_t scanned; /* bytes of buf known to hold no newline */
    bool cut;       /* the line so far went out in pieces: its newline alone adds nothing */
} line_stream;

void line_stream_init(line_stream *s, int fd, int dest, out_queue *out, const char *prefix, bool quiet_info);
/* Reads what is there now and passes on the complete lines. Returns the bytes read, 0 at
 * end of output (and closes the stream), -EAGAIN when nothing is waiting. */
ssize_t line_stream_read(line_stream *s);
/* After its writer exited: takes what is left in the pipe (a bounded amount: something
 * the child started may still hold the pipe and keep writing), then closes it. */
void line_stream_drain(line_stream *s);
/* Passes on what is left as a last line, closes the pipe and frees the buffer. */
void line_stream_close(line_stream *s);
