/* --metrics: JSON lines, one per step and one per epoch, for ddp-compare and people. */
#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/limits.h"
#include "worker/trainer/trainer.h"

/* The step a metrics line was written at, or UINT64_MAX for a line that is not one; and
 * whether it is an epoch's line (written after the epoch's checkpoint). */
static uint64_t line_step(const char *line, bool *ret_epoch) {
    cJSON *j = cJSON_Parse(line);
    const cJSON *step = cJSON_GetObjectItem(j, "step"), *type = cJSON_GetObjectItem(j, "type");
    uint64_t s = cJSON_IsNumber(step) && step->valuedouble >= 0 ? (uint64_t)step->valuedouble : UINT64_MAX;
    *ret_epoch = cJSON_IsString(type) && strcmp(type->valuestring, "epoch") == 0;
    cJSON_Delete(j);
    return s;
}

/* A resumed run continues the file: the lines up to the checkpoint's step stay, those a
 * run wrote after it (and then lost) go, rewritten whole so that a crash keeps the old.
 * Where --resume found no checkpoint but the file has an epoch's line past step 0, an
 * earlier run saved one that is not where --checkpoint says: its lines are kept, and the
 * run refused rather than started over them. */
static int metrics_keep_history(trainer *t) {
    FILE *in = fopen(t->metrics_path, "r");
    if (!in)
        return errno == ENOENT ? 0 : trainer_fail(t, -errno, "--metrics %s: %s", t->metrics_path, strerror(errno));
    atomic_file out;
    char err[1024];
    int r = atomic_file_open(&out, t->metrics_path, 0644, "--metrics", err, sizeof(err));
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while (r == 0 && (n = getline(&line, &cap, in)) > 0) {
        if (line[n - 1] != '\n') { /* the last, cut short by a crash: what follows would be glued to it */
            fprintf(stderr, "ddp-worker: rank %d: --metrics %s: its last line has no end (%zd bytes): dropped\n",
                    t->rank, t->metrics_path, n);
            continue;
        }
        bool epoch_line;
        uint64_t step = line_step(line, &epoch_line);
        if (step > t->step && !t->links.resumed && step != UINT64_MAX && epoch_line) {
            /* no checkpoint was found, yet a run saved one: its epoch line says so (one that
             * never got that far left only step lines, dropped as lost work) */
            snprintf(err, sizeof(err),
                     "--resume: no checkpoint at %.200s, yet --metrics %.200s has lines of an earlier run that saved "
                     "one (an epoch ended at step %llu): not starting over them (is the checkpoint's path right, its "
                     "filesystem mounted? To start "
                     "from the beginning, move the file away)",
                     t->opts->checkpoint, t->metrics_path, (unsigned long long)step);
            r = -EEXIST;
            break;
        }
        if (step > t->step)
            continue; /* written after the checkpoint: that work is lost */
        for (ssize_t done = 0; r == 0 && done < n;) {
            ssize_t w = write(out.fd, line + done, (size_t)(n - done));
            if (w < 0 && errno != EINTR)
                r = -errno;
            else if (w == 0)
                r = -EIO;
            else if (w > 0)
                done += w;
        }
    }
    if (r == 0 && ferror(in))
        r = -EIO;
    free(line);
    fclose(in);
    if (r == -EEXIST) {
        atomic_file_abort(&out);
        return trainer_refuse(t, r, "%s", err);
    }
    if (r < 0 && out.fd >= 0) {
        snprintf(err, sizeof(err), "--metrics %.400s: %s", t->metrics_path, strerror(-r));
        atomic_file_abort(&out);
    } else if (r == 0)
        r = atomic_file_commit(&out, "--metrics", err, sizeof(err));
    return r < 0 ? trainer_fail(t, r, "%s", err) : 0;
}

/* Every --metrics fits metrics_path with %r expanded (2 bytes for at most 4 digits), so
 * that the loop below never cuts a name short: the option's own limit ensures it. */
_Static_assert(DDP_MAX_WORLD_SIZE <= 10000 && 2 * DDP_MAX_CONFIG_STRING + 12 < sizeof(((trainer *)0)->metrics_path),
               "--metrics with %r expanded may not fit metrics_path");

/* Opens path for writing without blocking on a FIFO that has no reader (ENXIO at once),
 * then blocking again, as a slow reader must slow us rather than fail the write. */
static FILE *metrics_fopen(const char *path, bool append) {
    int fd = open(path, O_WRONLY | O_CREAT | O_NONBLOCK | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0644);
    if (fd < 0)
        return NULL;
    int flags = fcntl(fd, F_GETFL);
    FILE *f = flags >= 0 && fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0 ? fdopen(fd, append ? "a" : "w") : NULL;
    if (!f) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

int metrics_open(trainer *t) {
    const char *pattern = t->opts->metrics;
    if (!pattern)
        return 0;
    size_t k = 0;
    char *path = t->metrics_path;
    for (const char *p = pattern; *p && k + 12 < sizeof(t->metrics_path); p++) /* %r: the rank */
        if (p[0] == '%' && p[1] == 'r') {
            k += (size_t)snprintf(path + k, sizeof(t->metrics_path) - k, "%d", t->rank);
            p++;
        } else
            path[k++] = *p;
    path[k] = '\0';
    if (t->rank != 0 && !strstr(pattern, "%r"))
        return 0; /* rank 0's file */
    struct stat st;
    bool exists = stat(path, &st) == 0, regular = exists && S_ISREG(st.st_mode);
    if (t->opts->resume && regular)
        TRY(metrics_keep_history(t));
    /* A fresh run starts the file; a resumed one, or a pipe or device, is written on. */
    if (!(t->metrics = metrics_fopen(path, t->opts->resume || (exists && !regular)))) {
        if (errno == ENXIO && exists && S_ISFIFO(st.st_mode))
            return trainer_fail(t, -ENXIO, "--metrics %s: a FIFO with no reader (start its reader first)", path);
        return trainer_fail(t, -errno, "--metrics: cannot write %s: %s", path, strerror(errno));
    }
    return 0;
}

void metrics_sync(trainer *t) {
    /* a pipe, a terminal or a device cannot be synced (EINVAL): there is nothing to keep */
    if (t->metrics && fdatasync(fileno(t->metrics)) < 0 && errno != EINVAL && errno != EROFS && !t->metrics_error) {
        t->metrics_error = errno;
        fprintf(stderr, "ddp-worker: rank %d: --metrics %s: cannot sync: %s\n", t->rank, t->metrics_path,
                strerror(errno));
    }
}

int metrics_sync_before_save(trainer *t) {
    metrics_sync(t);
    /* each rank its own file (%r): rank 0 saves only once every rank's lines are on disk,
     * so that a power loss cannot keep a checkpoint past a rank's lines. Whether --metrics
     * is given is agreed by every rank (agree.c), its %r not: the wait is on the first. And
     * a collective among the ranks, not ddpd's barrier: the stop for a ddpd gone must
     * still get to its checkpoint. */
    if (!t->opts->metrics || t->world < 2)
        return 0;
    int32_t synced = 1;
    int r = ddp_all_reduce(t->g, &synced, 1, DDP_I32, DDP_MIN);
    return r < 0 ? trainer_fail(t, r, "--metrics: waiting for every rank's sync: %s", ddp_last_error(t->g)) : 0;
}

void metrics_close(trainer *t) {
    if (t->metrics && fclose(t->metrics) != 0 && !t->metrics_error)
        t->metrics_error = errno;
    t->metrics = NULL;
}

static long peak_rss_kb(void) {
    struct rusage u;
    return getrusage(RUSAGE_SELF, &u) == 0 ? u.ru_maxrss : 0;
}

/* Keyed "cpu" or "cuda:K": what this process allocated there; on a GPU also what the
 * device reports in use (every process and the CUDA context) and the host staging. */
static void add_device_memory(cJSON *j, const model *m) {
    cJSON *mem = cJSON_AddObjectToObject(j, "device_memory");
    for (int i = 0; i < m->n_stages; i++) {
        backend *b = m->stages[i].b;
        char name[32];
        if (b->device >= 0)
            snprintf(name, sizeof(name), "%s:%d", b->ops->name, b->device);
        else
            snprintf(name, sizeof(name), "%s", b->ops->name);
        if (cJSON_GetObjectItem(mem, name)) /* --devices cpu,cpu or 0,0: one entry each */
            snprintf(name + strlen(name), sizeof(name) - strlen(name), "#%d", i);
        cJSON *dev = cJSON_AddObjectToObject(mem, name);
        cJSON_AddNumberToObject(dev, "current_bytes", (double)b->memory.current);
        cJSON_AddNumberToObject(dev, "peak_bytes", (double)b->memory.peak);
        size_t used, total;
        if (b->ops->device_memory(b, &used, &total) == 0) {
            cJSON_AddNumberToObject(dev, "device_used_bytes", (double)used);
            cJSON_AddNumberToObject(dev, "device_total_bytes", (double)total);
            cJSON_AddNumberToObject(dev, "host_staging_bytes", (double)b->host.peak);
        }
    }
}

void metrics_write(trainer *t, const char *kind, uint64_t epoch, double loss, double accuracy, double samples_per_s,
                   double seconds) {
    if (!t->metrics)
        return;
    ddp_stats st = {0};
    ddp_get_stats(t->g, &st);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "type", kind);
    cJSON_AddNumberToObject(j, "rank", t->rank);
    cJSON_AddNumberToObject(j, "world", t->world);
    cJSON_AddStringToObject(j, "mode", t->mode->name);
    cJSON_AddStringToObject(j, "transport", trainer_transport(t));
    cJSON_AddNumberToObject(j, "step", (double)t->step);
    cJSON_AddNumberToObject(j, "epoch", (double)epoch);
    cJSON_AddNumberToObject(j, "loss", loss);
    if (!strcmp(kind, "epoch")) { /* the steps the loss and the rate are of: a part, after a resume */
        cJSON_AddNumberToObject(j, "first_step_in_epoch", (double)t->line_first_step);
        cJSON_AddNumberToObject(j, "steps", (double)t->line_steps);
    }
    if (!strcmp(kind, "epoch") && t->m.spec.loss == LOSS_MSE) /* the toy model: a loss, not an accuracy */
        cJSON_AddNumberToObject(j, "test_loss", t->test_loss);
    if (!isnan(accuracy))
        cJSON_AddNumberToObject(j, "test_accuracy", accuracy);
    cJSON_AddNumberToObject(j, "samples_per_s", samples_per_s);
    cJSON_AddNumberToObject(j, "seconds", seconds);
    cJSON_AddNumberToObject(j, "compute_s", t->times.compute_s);
    cJSON_AddNumberToObject(j, "forward_s", t->times.forward_s);
    cJSON_AddNumberToObject(j, "backward_s", t->times.backward_s);
    cJSON_AddNumberToObject(j, "optimizer_s", t->times.optimizer_s);
    cJSON_AddNumberToObject(j, "comm_s", t->times.comm_s);
    cJSON_AddNumberToObject(j, "wait_s", t->times.wait_s);
    cJSON_AddNumberToObject(j, "peer_wait_s", t->times.peer_wait_s);
    cJSON_AddNumberToObject(j, "bytes_sent", (double)st.bytes_sent);
    cJSON_AddNumberToObject(j, "bytes_received", (double)st.bytes_received);
    cJSON_AddNumberToObject(j, "peak_rss_kb", (double)peak_rss_kb());
    cJSON_AddStringToObject(j, "model", t->m.spec.name);
    cJSON_AddNumberToObject(j, "n_params", (double)t->m.spec.n_params);
    cJSON_AddNumberToObject(j, "outputs", t->m.spec.sizes[t->m.spec.n_layers]);
    cJSON_AddNumberToObject(j, "global_batch", t->global_batch);
    if (!strcmp(kind, "epoch")) { /* per peer; the last entry is ddpd */
        cJSON *to = cJSON_AddArrayToObject(j, "bytes_to"), *from = cJSON_AddArrayToObject(j, "bytes_from");
        for (int p = 0; p <= t->world; p++) {
            unsigned long long sent = 0, received = 0;
            ddp_get_peer_stats(t->g, p, &sent, &received);
            cJSON_AddItemToArray(to, cJSON_CreateNumber((double)sent));
            cJSON_AddItemToArray(from, cJSON_CreateNumber((double)received));
        }
    }
    add_device_memory(j, &t->m);
    char *text = cJSON_PrintUnformatted(j);
    if (text && (fprintf(t->metrics, "%s\n", text) < 0 || fflush(t->metrics) != 0)) {
        /* Said once; training goes on (the checkpoint matters more) and the exit code says it. */
        t->metrics_error = errno ? errno : EIO;
        fprintf(stderr, "ddp-worker: rank %d: --metrics %s: cannot write: %s; no more lines go there\n", t->rank,
                t->metrics_path, strerror(t->metrics_error));
        fclose(t->metrics);
        t->metrics = NULL;
    }
    free(text);
    cJSON_Delete(j);
}
