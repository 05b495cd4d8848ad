#define _GNU_SOURCE /* memfd_create */
#include "common/fd_passed.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The mount id fdinfo gives fd, or -1. Reading fdinfo asks nothing of the file's
 * filesystem for a regular file. */
static int mount_id(int fd) {
    char path[64], text[512];
    snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    const char *at = strstr(text, "mnt_id:");
    if (!at) {
        errno = ENOENT; /* a /proc without it: nothing to tell by, now or later */
        return -1;
    }
    return atoi(at + 7);
}

/* The mount of memfds of shared memory, found once a probe succeeds (one that fails for
 * want of descriptors is tried again at the next call, never taken as an answer); read
 * without the lock once known. */
static pthread_mutex_t probe_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int memfd_mount = -1;
static _Atomic bool memfd_mount_unknowable; /* /proc here has no fdinfo mount to tell by */

static void fork_handlers_once(void);

static int memfd_mount_id(void) {
    int id = atomic_load(&memfd_mount);
    if (id >= 0 || atomic_load(&memfd_mount_unknowable))
        return id;
    fork_handlers_once(); /* a child forked while another thread probes must not inherit the lock held */
    pthread_mutex_lock(&probe_lock);
    if (atomic_load(&memfd_mount) < 0 && !atomic_load(&memfd_mount_unknowable)) {
        int fd = memfd_create("ddp-probe", MFD_CLOEXEC);
        if (fd >= 0) {
            int found = mount_id(fd);
            if (found >= 0)
                atomic_store(&memfd_mount, found);
            else if (errno != EMFILE && errno != ENFILE && errno != ENOMEM)
                atomic_store(&memfd_mount_unknowable, true);
            close(fd);
        }
    }
    pthread_mutex_unlock(&probe_lock);
    return atomic_load(&memfd_mount);
}

bool fd_passed_can_tell(void) {
    return memfd_mount_id() >= 0;
}

fd_passed_kind fd_passed_kind_of(int fd) {
    int memfd_mount_now = memfd_mount_id();
    if (memfd_mount_now < 0 && atomic_load(&memfd_mount_unknowable))
        return FD_PASSED_UNKNOWN; /* no /proc here (or one without fdinfo's mount): nothing to tell by */
    char path[64], target[256];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof(target) - 1);
    if (n < 0)
        return FD_PASSED_FILE; /* not open */
    target[n] = '\0';
    if (!strncmp(target, "socket:[", 8))
        return FD_PASSED_SOCKET;
    if (!strncmp(target, "pipe:[", 6) || !strncmp(target, "anon_inode:", 11))
        return FD_PASSED_QUIET;
    if (strncmp(target, "/memfd:", 7) != 0)
        return FD_PASSED_FILE;
    /* a memfd's name, on the memfds' mount; where either cannot be read now (no descriptor
     * to spare), it is not taken for one */
    int mount = memfd_mount_now >= 0 ? mount_id(fd) : -1;
    return mount >= 0 && mount == memfd_mount_now ? FD_PASSED_MEMFD : FD_PASSED_FILE;
}

const char *fd_passed_kind_name(fd_passed_kind kind) {
    switch (kind) {
    case FD_PASSED_MEMFD:
        return "a memfd";
    case FD_PASSED_SOCKET:
        return "a socket";
    case FD_PASSED_QUIET:
        return "a pipe or an anonymous inode";
    case FD_PASSED_FILE:
        return "a file elsewhere";
    default:
        return "unknown";
    }
}

/* The closing threads' queue: descriptors to close, in order. Each thread takes one at a
 * time, and a thread is started whenever none is free to take the next, up to
 * FD_PASSED_CLOSERS: a close that waits for good holds one thread and one descriptor, not
 * all the others behind it. */
#define FD_PASSED_CLOSERS 16

typedef struct closing {
    int fd;
    struct closing *next;
} closing;

static pthread_mutex_t closing_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t closing_ready = PTHREAD_COND_INITIALIZER;
static closing *closing_head, **closing_tail = &closing_head;
static size_t queued;                /* in the queue */
static size_t closers, closers_idle; /* threads, and those waiting for the queue */

static void *closer(void *unused) {
    (void)unused;
    pthread_mutex_lock(&closing_lock);
    for (;;) {
        closers_idle++;
        while (!closing_head)
            pthread_cond_wait(&closing_ready, &closing_lock);
        closers_idle--;
        closing *c = closing_head;
        if (!(closing_head = c->next))
            closing_tail = &closing_head;
        queued--;
        pthread_mutex_unlock(&closing_lock);
        close(c->fd); /* may wait on its filesystem: this thread's only job */
        free(c);
        pthread_mutex_lock(&closing_lock);
    }
    return NULL;
}

/* A forked child has none of the threads: what was queued (its own copies) waits for the
 * thread its next close aside starts. */
static void closing_after_fork(void) {
    pthread_mutex_init(&probe_lock, NULL);
    pthread_mutex_init(&closing_lock, NULL);
    pthread_cond_init(&closing_ready, NULL);
    closers = closers_idle = 0;
}

static void closing_before_fork(void) {
    pthread_mutex_lock(&probe_lock);
    pthread_mutex_lock(&closing_lock);
}

static void closing_in_parent(void) {
    pthread_mutex_unlock(&closing_lock);
    pthread_mutex_unlock(&probe_lock);
}

static pthread_once_t closing_once = PTHREAD_ONCE_INIT;

static void closing_setup(void) {
    pthread_atfork(closing_before_fork, closing_in_parent, closing_after_fork);
}

static void fork_handlers_once(void) {
    pthread_once(&closing_once, closing_setup);
}

void fd_passed_close_aside(int fd) {
    fork_handlers_once();
    closing *c = malloc(sizeof(*c));
    if (!c) {
        close(fd); /* no memory: at once, as before */
        return;
    }
    *c = (closing){.fd = fd};
    pthread_mutex_lock(&closing_lock);
    if (queued >= closers_idle && closers < FD_PASSED_CLOSERS) { /* the idle ones have as many to take */
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, closer, NULL) == 0)
            closers++;
        pthread_attr_destroy(&attr);
    }
    if (closers == 0) { /* no thread could be had */
        pthread_mutex_unlock(&closing_lock);
        free(c);
        close(fd);
        return;
    }
    *closing_tail = c;
    closing_tail = &c->next;
    queued++;
    pthread_cond_signal(&closing_ready);
    pthread_mutex_unlock(&closing_lock);
}

size_t fd_passed_closing(void) {
    fork_handlers_once();
    pthread_mutex_lock(&closing_lock);
    size_t n = queued + (closers - closers_idle);
    pthread_mutex_unlock(&closing_lock);
    return n;
}
