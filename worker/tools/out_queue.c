#define _GNU_SOURCE /* O_CLOEXEC */
#include "worker/tools/out_queue.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHUNK_BYTES 4096u /* lines for one fd share a chunk; held counts it whole */

/* Lines for one fd, back to back: written from done to len, then freed (the last one is
 * kept, empty, for the next lines). */
struct out_chunk {
    out_chunk *next;
    int fd;
    size_t len, done, cap;
    char data[];
};

void out_queue_open(out_queue *q) {
    for (int fd = 1; fd <= 2; fd++) {
        q->writer[fd] = fd;
        struct stat st;
        if (fstat(fd, &st) < 0)
            continue;
        q->socket[fd] = S_ISSOCK(st.st_mode);
        if (isatty(fd)) { /* a terminal polls writable with any room: a write could still wait */
            char path[32];
            snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
            int w = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
            int high = w >= 0 ? fcntl(w, F_DUPFD_CLOEXEC, 3) : -1; /* not in a closed 0, 1 or 2's place */
            if (w >= 0)
                close(w);
            if (high >= 0)
                q->writer[fd] = high;
        }
    }
}

static out_chunk *chunk_new(out_queue *q, int fd, size_t need) {
    size_t cap = need > CHUNK_BYTES ? need : CHUNK_BYTES;
    out_chunk *c = malloc(sizeof(*c) + cap);
    if (!c)
        return NULL;
    *c = (out_chunk){.fd = fd, .cap = cap};
    q->held += sizeof(*c) + cap;
    if (q->tail)
        q->tail->next = c;
    else
        q->head = c;
    q->tail = c;
    return c;
}

void out_queue_put(out_queue *q, int fd, const char *prefix, const char *line, size_t n) {
    if (fd < 1 || fd > 2 || q->gone[fd])
        return;
    size_t plen = strlen(prefix), need = plen + n + 1;
    out_chunk *c = q->tail;
    if (c && c->done == c->len && c->cap >= need) { /* all written: it takes lines for any fd */
        c->fd = fd;
        c->len = c->done = 0;
    }
    if (!c || c->fd != fd || c->cap - c->len < need)
        c = chunk_new(q, fd, need);
    if (!c) {
        q->dropped++;
        return;
    }
    memcpy(c->data + c->len, prefix, plen);
    memcpy(c->data + c->len + plen, line, n);
    c->data[c->len + plen + n] = '\n';
    c->len += need;
    q->waiting += need;
}

static void drop_head(out_queue *q) {
    out_chunk *c = q->head;
    q->head = c->next;
    if (!q->head)
        q->tail = NULL;
    q->waiting -= c->len - c->done;
    q->held -= sizeof(*c) + c->cap;
    free(c);
}

/* Writes what fd takes now of buf: bytes written, 0 when it takes none now, -1 when it
 * takes none ever (EPIPE, a full disk: output nobody can take is dropped). */
static ssize_t write_some(out_queue *q, int fd, const char *buf, size_t n) {
    int w = q->writer[fd] > 0 ? q->writer[fd] : fd;
    if (!q->socket[fd] && w == fd) {
        /* A pipe that polls writable takes PIPE_BUF bytes without blocking, blocking
         * descriptor or not; a regular file always takes them. */
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        if (poll(&pfd, 1, 0) <= 0)
            return 0;
        n = n < PIPE_BUF ? n : PIPE_BUF;
    }
    ssize_t r = q->socket[fd] ? send(w, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL) : write(w, buf, n);
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (r == 0)
        errno = EIO;
    return r > 0 ? r : -1;
}

void out_queue_write(out_queue *q) {
    while (q->head) {
        out_chunk *c = q->head;
        if (c->done == c->len && c == q->tail) { /* all written: kept for the next lines */
            c->len = c->done = 0;
            return;
        }
        if (c->done == c->len || q->gone[c->fd]) {
            drop_head(q);
            continue;
        }
        ssize_t w = write_some(q, c->fd, c->data + c->done, c->len - c->done);
        if (w == 0)
            return;
        if (w < 0) {
            q->gone[c->fd] = true;
            q->error[c->fd] = errno;
            continue;
        }
        c->done += (size_t)w;
        q->waiting -= (size_t)w;
    }
}

int out_queue_waiting_fd(const out_queue *q) {
    for (const out_chunk *c = q->head; c; c = c->next)
        if (c->done < c->len)
            return c->fd;
    return -1;
}

bool out_queue_flush(out_queue *q, int stop_fd) {
    for (;;) {
        out_queue_write(q);
        int fd = out_queue_waiting_fd(q);
        if (fd < 0)
            return true;
        struct pollfd pfds[2] = {{.fd = q->writer[fd] > 0 ? q->writer[fd] : fd, .events = POLLOUT},
                                 {.fd = stop_fd, .events = POLLIN}};
        int ready = poll(pfds, stop_fd >= 0 ? 2 : 1, -1);
        if (ready < 0 && errno != EINTR)
            return false;
        if (ready > 0 && pfds[1].revents)
            return false;
    }
}

void out_queue_free(out_queue *q) {
    while (q->head) {
        out_chunk *c = q->head;
        q->head = c->next;
        free(c);
    }
    for (int fd = 1; fd <= 2; fd++)
        if (q->writer[fd] > 2)
            close(q->writer[fd]);
    *q = (out_queue){0};
}
