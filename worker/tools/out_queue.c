#include "worker/tools/out_queue.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHUNK_BYTES (64u << 10) /* lines for one fd share a chunk: no allocation a line */

/* Lines for one fd, back to back: written from done to len, then freed. */
struct out_line {
    out_line *next;
    int fd;
    size_t len, done, cap;
    char data[];
};

/* The blocking way, for when no copy can be made: waits for room as long as it takes. */
static void write_now(int fd, const char *buf, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w > 0) {
            buf += w;
            n -= (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && errno == EAGAIN) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            poll(&pfd, 1, -1);
        } else {
            return;
        }
    }
}

void out_queue_put(out_queue *q, int fd, const char *prefix, const char *line, size_t n) {
    if (fd < 1 || fd > 2 || q->gone[fd])
        return;
    size_t plen = strlen(prefix);
    size_t need = plen + n + 1;
    out_line *l = q->tail;
    if (!l || l->fd != fd || l->cap - l->len < need) {
        size_t cap = need > CHUNK_BYTES ? need : CHUNK_BYTES;
        l = malloc(sizeof(*l) + cap);
        if (!l) {
            out_queue_write(q); /* what came before goes first, as far as it can */
            write_now(fd, prefix, plen);
            write_now(fd, line, n);
            write_now(fd, "\n", 1);
            return;
        }
        *l = (out_line){.fd = fd, .cap = cap};
        if (q->tail)
            q->tail->next = l;
        else
            q->head = l;
        q->tail = l;
    }
    memcpy(l->data + l->len, prefix, plen);
    memcpy(l->data + l->len + plen, line, n);
    l->data[l->len + plen + n] = '\n';
    l->len += need;
    q->bytes += need;
}

static void drop_head(out_queue *q) {
    out_line *l = q->head;
    q->head = l->next;
    if (!q->head)
        q->tail = NULL;
    q->bytes -= l->len - l->done;
    free(l);
}

void out_queue_write(out_queue *q) {
    while (q->head) {
        out_line *l = q->head;
        if (l->done == l->len && l == q->tail) { /* all written: kept for the next lines */
            l->len = l->done = 0;
            return;
        }
        if (l->done == l->len || q->gone[l->fd]) {
            drop_head(q);
            continue;
        }
        /* Room for PIPE_BUF bytes first: a write of that much to a pipe, terminal or
         * socket that polls writable does not block, even where the descriptor does. */
        struct pollfd pfd = {.fd = l->fd, .events = POLLOUT};
        if (poll(&pfd, 1, 0) <= 0 || !(pfd.revents & (POLLOUT | POLLERR | POLLHUP | POLLNVAL)))
            return;
        size_t n = l->len - l->done < PIPE_BUF ? l->len - l->done : PIPE_BUF;
        ssize_t w = write(l->fd, l->data + l->done, n);
        if (w < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        if (w <= 0) { /* EPIPE, EBADF, a full disk: output nobody can take is dropped */
            q->gone[l->fd] = true;
            continue;
        }
        l->done += (size_t)w;
        q->bytes -= (size_t)w;
    }
}

int out_queue_waiting_fd(const out_queue *q) {
    return q->bytes > 0 ? q->head->fd : -1;
}

bool out_queue_flush(out_queue *q, int stop_fd) {
    for (;;) {
        out_queue_write(q);
        if (q->bytes == 0)
            return true;
        struct pollfd pfds[2] = {{.fd = q->head->fd, .events = POLLOUT}, {.fd = stop_fd, .events = POLLIN}};
        int ready = poll(pfds, stop_fd >= 0 ? 2 : 1, -1);
        if (ready < 0 && errno != EINTR)
            return false;
        if (ready > 0 && pfds[1].revents)
            return false;
    }
}

void out_queue_free(out_queue *q) {
    while (q->head) {
        out_line *l = q->head;
        q->head = l->next;
        free(l);
    }
    *q = (out_queue){0};
}
