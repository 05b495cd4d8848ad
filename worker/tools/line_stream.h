/* A child's output for the launcher: one pipe, cut into lines that go out prefixed ("[rank
 * 3] ..."), whole, through the launcher's output queue, so that lines of different ranks
 * never interleave. A line is kept whole up to LINE_STREAM_MAX_BYTES; a longer one goes
 * out in pieces that long, and so does one whose end has not come LINE_STREAM_HOLD_MS
 * after its start (a prompt, a progress bar, `print(..., end="")` before a long task:
 * shown now, not at the rank's exit). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "worker/tools/out_queue.h"

#define LINE_STREAM_BYTES 8192           /* the buffer's first size */
#define LINE_STREAM_MAX_BYTES (1u << 20) /* and its last: a longer line goes out in pieces */
#define LINE_STREAM_HOLD_MS 1000         /* how long the start of a line waits for its end */

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
    size_t scanned;         /* bytes of buf known to hold no newline */
    bool cut;               /* the line so far went out in pieces: its newline alone adds nothing */
    uint64_t held_since_ms; /* when the start of the line in buf came (0: buf is empty) */
} line_stream;

void line_stream_init(line_stream *s, int fd, int dest, out_queue *out, const char *prefix, bool quiet_info);
/* Reads what is there now and passes on the complete lines. Returns the bytes read, 0 at
 * end of output (and closes the stream), -EAGAIN when nothing is waiting. */
ssize_t line_stream_read(line_stream *s);
/* When the line held in part is due to go out as a piece (UINT64_MAX: none is held), and
 * sending it then, if due by now_ms. */
uint64_t line_stream_due_ms(const line_stream *s);
void line_stream_flush_due(line_stream *s, uint64_t now_ms);
/* After its writer exited: takes what is left in the pipe (a bounded amount: something
 * the child started may still hold the pipe and keep writing), then closes it. */
void line_stream_drain(line_stream *s);
/* Passes on what is left as a last line, closes the pipe and frees the buffer. */
void line_stream_close(line_stream *s);
