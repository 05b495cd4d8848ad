/* The launcher's own output, its ranks' lines and its log: queued in the order they came
 * and written as stdout and stderr take them, never blocking, so that the launcher goes on
 * reaping, forwarding signals and timing its grace periods while a pager, a full pipe or a
 * stopped terminal holds its output (its ranks then block on theirs: the launcher stops
 * reading them past OUT_QUEUE_HIGH_BYTES). One line goes out whole before the next begins,
 * so lines never interleave, even where stdout and stderr are one pipe. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#define OUT_QUEUE_HIGH_BYTES (4u << 20) /* memory held, past which the launcher reads no more output */

typedef struct out_chunk out_chunk;

typedef struct {
    out_chunk *head, *tail;
    size_t held;      /* bytes allocated for what waits (chunks whole): the limit's measure */
    size_t waiting;   /* bytes queued, not yet written */
    unsigned dropped; /* lines lost for want of memory */
    bool gone[3];     /* by fd (stdout, stderr): nobody reads it (EPIPE, closed): lines to it are dropped */
    int error[3];     /* by fd: why it is gone (an errno: EPIPE, ENOSPC...), for the launcher to say */
    int writer[3];    /* by fd: what is written to, non-blocking (a terminal reopened so, else the fd) */
    bool socket[3];   /* by fd: a socket (journald's stream), written with MSG_DONTWAIT */
} out_queue;

/* Makes the writers: a terminal is reopened non-blocking (its own open file, so the
 * shell's stays as it was), a socket is sent to without waiting; a pipe takes PIPE_BUF
 * bytes without blocking once it polls writable, and a file always does. */
void out_queue_open(out_queue *q);
/* Queues prefix, then n bytes of line, then a newline, for fd (STDOUT_FILENO or
 * STDERR_FILENO). Out of memory for the copy, the line is dropped and counted. */
void out_queue_put(out_queue *q, int fd, const char *prefix, const char *line, size_t n);
/* Writes what the destinations take now, without blocking. */
void out_queue_write(out_queue *q);
/* The fd the next line waits to be written to, or -1 when nothing waits. */
int out_queue_waiting_fd(const out_queue *q);
/* Writes the rest, waiting for room as long as a reader is there, unless stop_fd (the
 * signal pipe) becomes readable first: returns false if it gave up with lines left. */
bool out_queue_flush(out_queue *q, int stop_fd);
void out_queue_free(out_queue *q);
