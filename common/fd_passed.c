#define _GNU_SOURCE /* memfd_create */
#include "common/fd_passed.h"

#include <pthread.h>
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
    return at ? atoi(at + 7) : -1;
}

static int memfd_mount = -1;
static pthread_once_t memfd_mount_once = PTHREAD_ONCE_INIT;

/* Every memfd of shared memory lives on the kernel's one internal mount: a fresh one's. */
static void find_memfd_mount(void) {
    int fd = memfd_create("ddp-probe", MFD_CLOEXEC);
    if (fd >= 0) {
        memfd_mount = mount_id(fd);
        close(fd);
    }
}

fd_passed_kind fd_passed_kind_of(int fd) {
    pthread_once(&memfd_mount_once, find_memfd_mount);
    if (memfd_mount < 0) /* no /proc here (or one without fdinfo's mount): nothing to tell by */
        return FD_PASSED_UNKNOWN;
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
    int mount = mount_id(fd);
    return mount == memfd_mount && !strncmp(target, "/memfd:", 7) ? FD_PASSED_MEMFD : FD_PASSED_FILE;
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

/* The closing thread's queue: descriptors to close, in order. */
typedef struct closing {
    int fd;
    struct closing *next;
} closing;

static pthread_mutex_t closing_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t closing_ready = PTHREAD_COND_INITIALIZER;
static closing *closing_head, **closing_tail = &closing_head;
static bool closer_started;

static void *closer(void *unused) {
    (void)unused;
    pthread_mutex_lock(&closing_lock);
    for (;;) {
        while (!closing_head)
            pthread_cond_wait(&closing_ready, &closing_lock);
        closing *c = closing_head;
        if (!(closing_head = c->next))
            closing_tail = &closing_head;
        pthread_mutex_unlock(&closing_lock);
        close(c->fd); /* may wait on its filesystem: this thread's only job */
        free(c);
        pthread_mutex_lock(&closing_lock);
    }
    return NULL;
}

void fd_passed_close_aside(int fd) {
    closing *c = malloc(sizeof(*c));
    pthread_mutex_lock(&closing_lock);
    if (c && !closer_started) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        closer_started = pthread_create(&t, &attr, closer, NULL) == 0;
        pthread_attr_destroy(&attr);
    }
    if (!c || !closer_started) {
        pthread_mutex_unlock(&closing_lock);
        free(c);
        close(fd); /* no thread: at once, as before */
        return;
    }
    *c = (closing){.fd = fd};
    *closing_tail = c;
    closing_tail = &c->next;
    pthread_cond_signal(&closing_ready);
    pthread_mutex_unlock(&closing_lock);
}
