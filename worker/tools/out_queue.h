/* The launcher's own output, its ranks' lines and its log: queued in the order they came
 * and written as stdout and stderr take them, never blocking, so that the launcher goes on
 * reaping, forwarding signals and timing its grace periods while a pager, a full pipe or a
 * stopped terminal holds its output (its ranks then block on theirs: the launcher stops
 * reading them past OUT_QUEUE_HIGH_BYTES). One line goes out whole before the next begins,
 * so lines never interleave, even where stdout and stderr are one pipe. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#define OUT_QUEUE_HIGH_BYTES (4u << 20) /* past this, the launcher reads no more output */

typedef struct out_line out_line;

typedef struct {
    out_line *head, *tail;
    size_t bytes; /* queued, not yet written */
    bool gone[3]; /* by fd (stdout, stderr): nobody reads it (EPIPE, closed): lines to it are dropped */
} out_queue;

/* Queues prefix, then n bytes of line, then a newline, for fd (STDOUT_FILENO or
 * STDERR_FILENO). Out of memory for the copy, it is written at once, blocking. */
void out_queue_put(out_queue *q, int fd, const char *prefix, const char *line, size_t n);
/* Writes what the destinations take now, without blocking. */
void out_queue_write(out_queue *q);
/* The fd the next line waits to be written to, or -1 when nothing waits. */
int out_queue_waiting_fd(const out_queue *q);
/* Writes the rest, waiting for room as long as a reader is there, unless stop_fd (the
 * signal pipe) becomes readable first: returns false if it gave up with lines left. */
bool out_queue_flush(out_queue *q, int stop_fd);
void out_queue_free(out_queue *q);
