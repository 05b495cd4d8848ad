/* --metrics: JSON lines, one per step and one per epoch, for ddp-compare and people. */
#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "worker/trainer/trainer.h"

int metrics_open(trainer *t) {
    const char *pattern = t->opts->metrics;
    if (!pattern)
        return 0;
    char path[4096];
    size_t k = 0;
    for (const char *p = pattern; *p && k + 12 < sizeof(path); p++) /* %r: the rank */
        if (p[0] == '%' && p[1] == 'r') {
            k += (size_t)snprintf(path + k, sizeof(path) - k, "%d", t->rank);
            p++;
        } else
            path[k++] = *p;
    path[k] = '\0';
    bool mine = t->rank == 0 || strstr(pattern, "%r");
    if (mine && !(t->metrics = fopen(path, "w")))
        return trainer_fail(t, -errno, "--metrics: cannot write %s: %s", path, strerror(errno));
    return 0;
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

void metrics_write(trainer *t, const char *kind, double loss, double accuracy, double samples_per_s, double seconds) {
    if (!t->metrics)
        return;
    ddp_stats st = {0};
    ddp_get_stats(t->g, &st);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "type", kind);
    cJSON_AddNumberToObject(j, "rank", t->rank);
    cJSON_AddNumberToObject(j, "world", t->world);
    cJSON_AddStringToObject(j, "mode", t->mode->name);
    cJSON_AddNumberToObject(j, "step", (double)t->step);
    cJSON_AddNumberToObject(j, "epoch", (double)t->epoch);
    cJSON_AddNumberToObject(j, "loss", loss);
    if (!strcmp(kind, "epoch") && t->m.spec.loss == LOSS_MSE) /* the toy model: a loss, not an accuracy */
        cJSON_AddNumberToObject(j, "test_loss", t->test_loss);
    if (!isnan(accuracy))
        cJSON_AddNumberToObject(j, "test_accuracy", accuracy);
    cJSON_AddNumberToObject(j, "samples_per_s", samples_per_s);
    cJSON_AddNumberToObject(j, "seconds", seconds);
    cJSON_AddNumberToObject(j, "compute_s", t->times.compute_s);
    cJSON_AddNumberToObject(j, "comm_s", t->times.comm_s);
    cJSON_AddNumberToObject(j, "wait_s", t->times.wait_s);
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
    if (text) {
        fprintf(t->metrics, "%s\n", text);
        fflush(t->metrics);
    }
    free(text);
    cJSON_Delete(j);
}
