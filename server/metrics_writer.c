#include "server/metrics_writer.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/atomic_file.h"
#include "common/log.h"
#include "server/helper_thread.h"

struct metrics_writer {
    pthread_mutex_t lock;
    pthread_cond_t posted, idle; /* idle: on the monotonic clock */
    pthread_t thread;
    char *path, *group_name;
    gid_t gid;
    char *text; /* the latest text not taken yet, or NULL */
    size_t size;
    bool writing, stopping, orphaned; /* orphaned: stopped while the filesystem held a write */
    bool group_warned;
    unsigned long written;
    log_ratelimit failures;
};

static void writer_free(metrics_writer *w) {
    free(w->text);
    free(w->path);
    free(w->group_name);
    pthread_cond_destroy(&w->idle);
    pthread_cond_destroy(&w->posted);
    pthread_mutex_destroy(&w->lock);
    free(w);
}

/* One text into the file, whole, atomically: 0 or a negative error, err saying what. */
static int write_text(metrics_writer *w, const char *text, size_t size, char *err, size_t err_size) {
    atomic_file f;
    /* Every job whole, as root and operators see them: readable by --metrics-group only
     * (node_exporter's: its textfile collector runs as its own user), not by every local
     * user, to whom ddpctl shows others' jobs without their members. */
    int r = atomic_file_open(&f, w->path, 0640, "--metrics-file", err, err_size);
    if (r < 0)
        return r;
    if (w->group_name && fchown(f.fd, (uid_t)-1, w->gid) < 0 && !w->group_warned) {
        w->group_warned = true; /* not root, nor in the group: the file keeps ddpd's */
        log_warn("--metrics-file %s: cannot give it to group %s: %s", w->path, w->group_name, strerror(errno));
    }
    for (size_t done = 0; r == 0 && done < size;) {
        ssize_t n = write(f.fd, text + done, size - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            r = n < 0 ? -errno : -EIO;
        else
            done += (size_t)n;
    }
    if (r < 0) {
        snprintf(err, err_size, "--metrics-file %s: cannot write it: %s", w->path, strerror(-r));
        atomic_file_abort(&f);
        return r;
    }
    return atomic_file_commit(&f, "--metrics-file", err, err_size);
}

static void *writer_main(void *arg) {
    metrics_writer *w = arg;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (!w->text && !w->stopping)
            pthread_cond_wait(&w->posted, &w->lock);
        if (!w->text) /* stopping, and all written */
            break;
        char *text = w->text, err[512];
        size_t size = w->size;
        w->text = NULL;
        w->writing = true;
        pthread_mutex_unlock(&w->lock);
        if (write_text(w, text, size, err, sizeof(err)) < 0)
            log_ratelimited(&w->failures, LOG_LEVEL_WARN, "%s", err);
        free(text);
        pthread_mutex_lock(&w->lock);
        w->writing = false;
        w->written++;
        pthread_cond_broadcast(&w->idle);
        if (w->orphaned)
            break;
    }
    bool orphaned = w->orphaned;
    pthread_mutex_unlock(&w->lock);
    if (orphaned)
        writer_free(w);
    return NULL;
}

int metrics_writer_start(metrics_writer **ret, const char *path, const char *group_name, gid_t gid) {
    metrics_writer *w = calloc(1, sizeof(*w));
    if (!w || !(w->path = strdup(path)) || (group_name && !(w->group_name = strdup(group_name)))) {
        if (w) {
            free(w->path);
            free(w);
        }
        return -ENOMEM;
    }
    w->gid = gid;
    w->failures = (log_ratelimit)LOG_RATELIMIT_INIT(60000, 3);
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->posted, NULL);
    helper_cond_init(&w->idle);
    int r = helper_thread_start(&w->thread, writer_main, w);
    if (r < 0) {
        writer_free(w);
        return r;
    }
    *ret = w;
    return 0;
}

void metrics_writer_post(metrics_writer *w, char *text, size_t size) {
    pthread_mutex_lock(&w->lock);
    free(w->text); /* not taken yet: the newer one instead */
    w->text = text;
    w->size = size;
    pthread_cond_signal(&w->posted);
    pthread_mutex_unlock(&w->lock);
}

bool metrics_writer_stop(metrics_writer *w, char *text, size_t size, int timeout_ms) {
    struct timespec until = helper_deadline(timeout_ms);
    pthread_mutex_lock(&w->lock);
    if (text) {
        free(w->text);
        w->text = text;
        w->size = size;
    }
    w->stopping = true;
    pthread_cond_signal(&w->posted);
    while ((w->text || w->writing) && pthread_cond_timedwait(&w->idle, &w->lock, &until) == 0)
        ;
    bool done = !w->text && !w->writing;
    pthread_t thread = w->thread;
    if (!done) {
        w->orphaned = true; /* the thread frees w once the filesystem lets it go */
        free(w->text);      /* nothing more after the write under way */
        w->text = NULL;
    }
    pthread_mutex_unlock(&w->lock);
    if (!done) {
        pthread_detach(thread);
        return false;
    }
    pthread_join(thread, NULL);
    writer_free(w);
    return true;
}

unsigned long metrics_writer_written(metrics_writer *w) {
    pthread_mutex_lock(&w->lock);
    unsigned long n = w->written;
    pthread_mutex_unlock(&w->lock);
    return n;
}
