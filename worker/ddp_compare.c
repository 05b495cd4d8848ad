/* ddp-compare: the same training in each sync mode, side by side.
 *
 *   ddp-compare -n 4 --modes dp,ddp,ps --steps 100 --out DIR -- --model mlp
 *
 * Each mode runs as its own job (a private ddpd unless --coordinator), every rank writing
 * its metrics; then one table: samples/s, step time split into compute, communication and
 * waiting, each rank's peak tracked device memory and RSS with the imbalance max/min,
 * bytes each rank moved, the busiest link, final loss and accuracy. DIR gets report.json,
 * report.md (the table) and report.svg (throughput per mode, memory per rank per mode). */
#include <cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/config.h"
#include "common/limits.h"
#include "common/log.h"
#include "worker/launcher.h"

#define COMPARE_MAX_MODES 3
#define COMPARE_MAX_RANKS 64
#define COMPARE_SWEEP 4

typedef struct {
    int nproc;
    char *modes;
    int steps, epochs;
    char *out;
    char *coordinator;
    bool sweep_buckets;
    bool help, version;
} compare_options;

static const config_option compare_table[] = {
    {"nproc", CONFIG_INT, 1, COMPARE_MAX_RANKS, "2", offsetof(compare_options, nproc), "workers per run", "N", NULL,
     NULL, 'n'},
    {"modes", CONFIG_STRING, 1, 64, "dp,ddp,ps", offsetof(compare_options, modes), "sync modes to compare", "LIST"},
    {"steps", CONFIG_INT, 0, 100000000, "0", offsetof(compare_options, steps), "optimizer steps per run", "S"},
    {"epochs", CONFIG_INT, 0, 10000, "0", offsetof(compare_options, epochs), "epochs per run (default: 1)", "E"},
    {"out", CONFIG_STRING, 1, 4096, "ddp-compare", offsetof(compare_options, out),
     "directory for metrics and the reports", "DIR"},
    {"coordinator", CONFIG_STRING, 1, DDP_MAX_ENDPOINT, NULL, offsetof(compare_options, coordinator),
     "use this ddpd instead of a private one per run", "EP"},
    {"sweep-buckets", CONFIG_BOOL, 0, 1, NULL, offsetof(compare_options, sweep_buckets),
     "also run ddp with bucket sizes 0.25, 1, 5 and 25 MiB and report samples/s for each"},
    {"version", CONFIG_BOOL, 0, 1, NULL, offsetof(compare_options, version), "print the version and exit", NULL, NULL,
     NULL, 'V'},
    {"help", CONFIG_BOOL, 0, 1, NULL, offsetof(compare_options, help), "print this help and exit", NULL, NULL, NULL,
     'h'},
};

static const config_spec compare_spec = {
    .program = "ddp-compare",
    .usage = "-n N [--modes dp,ddp,ps] [--steps S | --epochs E] [--out DIR] [-- WORKER ARGS...]",
    .summary = "Runs the same training in each sync mode and compares throughput, time, memory and traffic.",
    .env_prefix = "DDP_COMPARE_",
    .options = compare_table,
    .n_options = sizeof(compare_table) / sizeof(compare_table[0]),
};

typedef struct {
    double peak_tracked, peak_rss_kb, sent, received;
    double device_used; /* what the GPU itself reports in use (cudaMemGetInfo); -1 on the CPU */
    double compute_s, comm_s, wait_s;
} rank_result;

typedef struct {
    char mode[16];
    double bucket_mb;          /* the sweep: 0 for the default */
    int world, steps;
    double samples_per_s, seconds, loss, accuracy;
    rank_result ranks[COMPARE_MAX_RANKS];
    double imbalance;          /* max/min peak tracked memory */
    int link_from, link_to;    /* busiest link; to == world: ddpd */
    double link_bytes;
} mode_result;

static double number(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItem(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

/* The last epoch line of a rank's metrics file, and the training seconds of all of them. */
static cJSON *last_epoch(const char *path, double *ret_seconds, char *err, size_t err_size) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, err_size, "%.400s: %s", path, strerror(errno));
        return NULL;
    }
    cJSON *last = NULL;
    char *line = NULL;
    size_t cap = 0;
    *ret_seconds = 0;
    while (getline(&line, &cap, f) > 0) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *type = j ? cJSON_GetObjectItem(j, "type") : NULL;
        if (cJSON_IsString(type) && !strcmp(type->valuestring, "epoch")) {
            *ret_seconds += number(j, "seconds");
            cJSON_Delete(last);
            last = j;
        } else
            cJSON_Delete(j);
    }
    free(line);
    fclose(f);
    if (!last)
        snprintf(err, err_size, "%.400s: no epoch line", path);
    return last;
}

static int collect(const char *out, const char *tag, mode_result *m, int world, char *err, size_t err_size) {
    m->world = world;
    double min = 0, max = 0;
    m->link_bytes = -1;
    for (int r = 0; r < world; r++) {
        char path[4200];
        snprintf(path, sizeof(path), "%s/%s-%d.jsonl", out, tag, r);
        double seconds;
        cJSON *e = last_epoch(path, &seconds, err, err_size);
        if (!e)
            return -EBADMSG;
        rank_result *rr = &m->ranks[r];
        /* the devices this rank trained on ("cpu", "cuda:K"; two with --devices): their
         * tracked peaks add up; the GPU's own figure is the first one's */
        const cJSON *devices = cJSON_GetObjectItem(e, "device_memory");
        const cJSON *dev = devices ? devices->child : NULL;
        rr->peak_tracked = 0;
        for (const cJSON *d = dev; d; d = d->next)
            rr->peak_tracked += number(d, "peak_bytes");
        rr->device_used = cJSON_GetObjectItem(dev, "device_used_bytes") ? number(dev, "device_used_bytes") : -1;
        rr->peak_rss_kb = number(e, "peak_rss_kb");
        rr->sent = number(e, "bytes_sent");
        rr->received = number(e, "bytes_received");
        rr->compute_s = number(e, "compute_s");
        rr->comm_s = number(e, "comm_s");
        rr->wait_s = number(e, "wait_s");
        min = r == 0 || rr->peak_tracked < min ? rr->peak_tracked : min;
        max = r == 0 || rr->peak_tracked > max ? rr->peak_tracked : max;
        const cJSON *to = cJSON_GetObjectItem(e, "bytes_to");
        for (int p = 0; p < cJSON_GetArraySize(to); p++) {
            double b = cJSON_GetArrayItem(to, p)->valuedouble;
            if (b > m->link_bytes) {
                m->link_bytes = b;
                m->link_from = r;
                m->link_to = p;
            }
        }
        if (r == 0) { /* the whole run's rate, not the last epoch's */
            m->seconds = seconds;
            m->samples_per_s = seconds > 0 ? number(e, "step") * number(e, "global_batch") / seconds : 0;
            m->loss = number(e, "loss");
            m->accuracy = number(e, "test_accuracy");
            m->steps = (int)number(e, "step");
        }
        cJSON_Delete(e);
    }
    m->imbalance = min > 0 ? max / min : 0;
    return 0;
}

static int run_mode(const compare_options *o, const char *program, char **extra, int n_extra, const char *mode,
                    double bucket_mb, const char *tag) {
    char metrics[4200], steps[32], bucket[32];
    snprintf(metrics, sizeof(metrics), "%s/%s-%%r.jsonl", o->out, tag);
    char **argv = calloc((size_t)n_extra + 16, sizeof(char *));
    int k = 0;
    argv[k++] = (char *)"ddp-worker";
    argv[k++] = (char *)"--mode";
    argv[k++] = (char *)mode;
    argv[k++] = (char *)"--metrics";
    argv[k++] = metrics;
    if (o->steps) {
        snprintf(steps, sizeof(steps), "%d", o->steps);
        argv[k++] = (char *)"--steps";
        argv[k++] = steps;
    } else {
        snprintf(steps, sizeof(steps), "%d", o->epochs ? o->epochs : 1);
        argv[k++] = (char *)"--epochs";
        argv[k++] = steps;
    }
    for (int i = 0; i < n_extra; i++)
        argv[k++] = extra[i];
    if (bucket_mb > 0) { /* last, so that it wins over the worker args */
        snprintf(bucket, sizeof(bucket), "%g", bucket_mb);
        argv[k++] = (char *)"--bucket-mb";
        argv[k++] = bucket;
    }
    argv[k] = NULL;
    launcher_options launch = {.nproc = o->nproc, .coordinator = o->coordinator, .grace_ms = 5000,
                               .program = program, .argv = argv};
    printf("ddp-compare: %s mode%s\n", mode, bucket_mb > 0 ? " (bucket sweep)" : "");
    fflush(stdout);
    int code = 1;
    launcher_run(&launch, &code);
    free(argv);
    return code;
}

static void fmt_bytes(double b, char *buf, size_t size) {
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4) {
        b /= 1024;
        u++;
    }
    snprintf(buf, size, u ? "%.1f %s" : "%.0f %s", b, units[u]);
}

/* The table, as Markdown: the terminal shows it, report.md keeps it. */
static void write_table(FILE *f, const mode_result *m, int n_modes) {
    fprintf(f, "| mode | samples/s | step ms: compute / comm / wait | peak tracked memory per rank | imbalance "
               "(max/min) | peak RSS per rank | sent / received per rank | busiest link | final loss | accuracy |\n");
    fprintf(f, "|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < n_modes; i++) {
        const mode_result *r = &m[i];
        double steps = r->steps > 0 ? r->steps : 1, c = 0, co = 0, w = 0;
        for (int k = 0; k < r->world; k++) {
            c += r->ranks[k].compute_s;
            co += r->ranks[k].comm_s;
            w += r->ranks[k].wait_s;
        }
        fprintf(f, "| %s | %.0f | %.2f / %.2f / %.2f | ", r->mode, r->samples_per_s, c / r->world / steps * 1e3,
                co / r->world / steps * 1e3, w / r->world / steps * 1e3);
        char b1[32], b2[32];
        for (int k = 0; k < r->world; k++) {
            fmt_bytes(r->ranks[k].peak_tracked, b1, sizeof(b1));
            fprintf(f, "%s%s", k ? ", " : "", b1);
            if (r->ranks[k].device_used >= 0) { /* a GPU: what the device says is in use */
                fmt_bytes(r->ranks[k].device_used, b2, sizeof(b2));
                fprintf(f, " (GPU in use %s)", b2);
            }
        }
        fprintf(f, " | %.2f | ", r->imbalance);
        for (int k = 0; k < r->world; k++)
            fprintf(f, "%s%.0f MiB", k ? ", " : "", r->ranks[k].peak_rss_kb / 1024);
        fprintf(f, " | ");
        for (int k = 0; k < r->world; k++) {
            fmt_bytes(r->ranks[k].sent, b1, sizeof(b1));
            fmt_bytes(r->ranks[k].received, b2, sizeof(b2));
            fprintf(f, "%s%s / %s", k ? ", " : "", b1, b2);
        }
        fmt_bytes(r->link_bytes, b1, sizeof(b1));
        if (r->link_to == r->world)
            fprintf(f, " | rank %d -> ddpd: %s", r->link_from, b1);
        else
            fprintf(f, " | rank %d -> rank %d: %s", r->link_from, r->link_to, b1);
        fprintf(f, " | %.4f | %.4f |\n", r->loss, r->accuracy);
    }
}

static cJSON *mode_json(const mode_result *r) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "mode", r->mode);
    cJSON_AddNumberToObject(j, "world", r->world);
    cJSON_AddNumberToObject(j, "steps", r->steps);
    cJSON_AddNumberToObject(j, "samples_per_s", r->samples_per_s);
    cJSON_AddNumberToObject(j, "seconds", r->seconds);
    cJSON_AddNumberToObject(j, "final_loss", r->loss);
    cJSON_AddNumberToObject(j, "test_accuracy", r->accuracy);
    cJSON_AddNumberToObject(j, "memory_imbalance", r->imbalance);
    cJSON *link = cJSON_AddObjectToObject(j, "busiest_link");
    cJSON_AddNumberToObject(link, "from_rank", r->link_from);
    if (r->link_to == r->world)
        cJSON_AddStringToObject(link, "to", "ddpd");
    else
        cJSON_AddNumberToObject(link, "to", r->link_to);
    cJSON_AddNumberToObject(link, "bytes", r->link_bytes);
    cJSON *ranks = cJSON_AddArrayToObject(j, "ranks");
    for (int k = 0; k < r->world; k++) {
        const rank_result *x = &r->ranks[k];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "rank", k);
        cJSON_AddNumberToObject(o, "peak_tracked_bytes", x->peak_tracked);
        if (x->device_used >= 0)
            cJSON_AddNumberToObject(o, "device_used_bytes", x->device_used);
        cJSON_AddNumberToObject(o, "peak_rss_kb", x->peak_rss_kb);
        cJSON_AddNumberToObject(o, "bytes_sent", x->sent);
        cJSON_AddNumberToObject(o, "bytes_received", x->received);
        cJSON_AddNumberToObject(o, "compute_s", x->compute_s);
        cJSON_AddNumberToObject(o, "comm_s", x->comm_s);
        cJSON_AddNumberToObject(o, "wait_s", x->wait_s);
        cJSON_AddItemToArray(ranks, o);
    }
    return j;
}

/* Grouped bars: throughput per mode on the left, peak tracked memory per rank per mode on
 * the right; values written on the bars, so it reads without the table. */
static void write_svg(FILE *f, const mode_result *m, int n_modes) {
    static const char *const colors[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
                                         "#b07aa1", "#ff9da7"};
    int width = 960, height = 420, top = 80, bottom = 340;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n", width, height, width, height);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%d\" y=\"24\" font-size=\"16\" text-anchor=\"middle\">ddp-compare: %d workers</text>\n",
            width / 2, m[0].world);
    /* left: samples/s */
    double best = 1;
    for (int i = 0; i < n_modes; i++)
        best = m[i].samples_per_s > best ? m[i].samples_per_s : best;
    fprintf(f, "<text x=\"200\" y=\"48\" text-anchor=\"middle\">throughput (samples/s)</text>\n");
    for (int i = 0; i < n_modes; i++) {
        double h = (bottom - top) * m[i].samples_per_s / best;
        int x = 60 + i * 110;
        fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"70\" height=\"%.1f\" fill=\"%s\"/>\n", x, bottom - h, h, colors[i]);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"middle\">%.0f</text>\n", x + 35, bottom - h - 4,
                m[i].samples_per_s);
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", x + 35, bottom + 18, m[i].mode);
    }
    fprintf(f, "<line x1=\"50\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", bottom, 60 + n_modes * 110, bottom);
    /* right: memory per rank per mode */
    double most = 1;
    for (int i = 0; i < n_modes; i++)
        for (int k = 0; k < m[i].world; k++)
            most = m[i].ranks[k].peak_tracked > most ? m[i].ranks[k].peak_tracked : most;
    int left = 440, group = (width - left - 40) / (n_modes ? n_modes : 1), bar = (group - 20) / (m[0].world ? m[0].world : 1);
    fprintf(f, "<text x=\"%d\" y=\"48\" text-anchor=\"middle\">peak tracked memory per rank (MiB)</text>\n",
            left + (width - left) / 2);
    for (int i = 0; i < n_modes; i++) {
        int gx = left + i * group;
        for (int k = 0; k < m[i].world; k++) {
            double h = (bottom - top) * m[i].ranks[k].peak_tracked / most;
            int x = gx + k * bar;
            fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"%s\"><title>%s rank %d</title></rect>\n",
                    x, bottom - h, bar - 2, h, colors[k % 8], m[i].mode, k);
            fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"10\">%.1f</text>\n", x + bar / 2,
                    bottom - h - 3, m[i].ranks[k].peak_tracked / 1048576.0);
        }
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", gx + (bar * m[i].world) / 2,
                bottom + 18, m[i].mode);
    }
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", left - 10, bottom, width - 30, bottom);
    for (int k = 0; k < m[0].world && k < 8; k++) {
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" fill=\"%s\"/>\n", left + k * 70, bottom + 40,
                colors[k]);
        fprintf(f, "<text x=\"%d\" y=\"%d\">rank %d</text>\n", left + k * 70 + 14, bottom + 49, k);
    }
    fprintf(f, "</svg>\n");
}

int main(int argc, char **argv) {
    compare_options o = {0};
    char err[512];
    int first = argc;
    /* worker args come after "--": find it first, options end there */
    int dash = argc;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--")) {
            dash = i;
            break;
        }
    int r = config_load(&compare_spec, &o, dash, argv, &first, err, sizeof(err));
    if (r < 0 || first < dash) {
        fprintf(stderr, "ddp-compare: %s\n", r < 0 ? err : "unexpected argument (worker flags go after --)");
        config_free(&compare_spec, &o);
        return 2;
    }
    if (o.help || o.version) {
        if (o.version)
            printf("ddp-compare %s\n", DDP_VERSION);
        else
            config_print_help(&compare_spec, stdout);
        config_free(&compare_spec, &o);
        return 0;
    }
    log_set_prefix("ddp-compare");
    log_set_level(LOG_LEVEL_WARN);
    char **extra = argv + (dash < argc ? dash + 1 : argc);
    int n_extra = dash < argc ? argc - dash - 1 : 0;

    mode_result results[COMPARE_MAX_MODES + COMPARE_SWEEP] = {0};
    int n_modes = 0, code = 0;
    char modes[80];
    snprintf(modes, sizeof(modes), "%s", o.modes);
    for (char *m = strtok(modes, ","); m; m = strtok(NULL, ",")) {
        if ((strcmp(m, "ddp") && strcmp(m, "dp") && strcmp(m, "ps")) || n_modes == COMPARE_MAX_MODES) {
            fprintf(stderr, "ddp-compare: --modes: '%s' is not ddp, dp or ps (each at most once)\n", m);
            config_free(&compare_spec, &o);
            return 2;
        }
        snprintf(results[n_modes++].mode, sizeof(results[0].mode), "%s", m);
    }
    char dir[PATH_MAX], program[PATH_MAX + 16];
    if (launcher_self_dir(dir, sizeof(dir)) < 0) {
        fprintf(stderr, "ddp-compare: cannot find its own directory\n");
        return 1;
    }
    snprintf(program, sizeof(program), "%s/ddp-worker", dir);
    if (mkdir(o.out, 0755) < 0 && errno != EEXIST) {
        fprintf(stderr, "ddp-compare: cannot create %s: %s\n", o.out, strerror(errno));
        config_free(&compare_spec, &o);
        return 1;
    }
    for (int i = 0; i < n_modes && code == 0; i++) {
        code = run_mode(&o, program, extra, n_extra, results[i].mode, 0, results[i].mode);
        if (code == 0 && collect(o.out, results[i].mode, &results[i], o.nproc, err, sizeof(err)) < 0) {
            fprintf(stderr, "ddp-compare: %s\n", err);
            code = 1;
        }
    }
    static const double sweep[COMPARE_SWEEP] = {0.25, 1, 5, 25};
    mode_result swept[COMPARE_SWEEP] = {0};
    for (int i = 0; o.sweep_buckets && i < COMPARE_SWEEP && code == 0; i++) {
        char tag[32];
        snprintf(tag, sizeof(tag), "ddp-bucket-%g", sweep[i]);
        snprintf(swept[i].mode, sizeof(swept[i].mode), "ddp");
        swept[i].bucket_mb = sweep[i];
        code = run_mode(&o, program, extra, n_extra, "ddp", sweep[i], tag);
        if (code == 0 && collect(o.out, tag, &swept[i], o.nproc, err, sizeof(err)) < 0) {
            fprintf(stderr, "ddp-compare: %s\n", err);
            code = 1;
        }
    }
    if (code != 0) {
        fprintf(stderr, "ddp-compare: a run failed (exit %d); no report\n", code);
        config_free(&compare_spec, &o);
        return code;
    }

    char path[4200];
    write_table(stdout, results, n_modes);
    snprintf(path, sizeof(path), "%s/report.md", o.out);
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "# ddp-compare: %d workers\n\n", o.nproc);
        write_table(f, results, n_modes);
        if (o.sweep_buckets) {
            fprintf(f, "\n| ddp bucket size (MiB) | samples/s |\n|---|---|\n");
            for (int i = 0; i < COMPARE_SWEEP; i++)
                fprintf(f, "| %g | %.0f |\n", swept[i].bucket_mb, swept[i].samples_per_s);
        }
        fclose(f);
    }
    if (o.sweep_buckets) {
        printf("\n| ddp bucket size (MiB) | samples/s |\n|---|---|\n");
        for (int i = 0; i < COMPARE_SWEEP; i++)
            printf("| %g | %.0f |\n", swept[i].bucket_mb, swept[i].samples_per_s);
    }
    cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "modes");
    cJSON_AddNumberToObject(root, "world", o.nproc);
    for (int i = 0; i < n_modes; i++)
        cJSON_AddItemToArray(arr, mode_json(&results[i]));
    if (o.sweep_buckets) {
        cJSON *s = cJSON_AddArrayToObject(root, "bucket_sweep");
        for (int i = 0; i < COMPARE_SWEEP; i++) {
            cJSON *x = cJSON_CreateObject();
            cJSON_AddNumberToObject(x, "bucket_mb", swept[i].bucket_mb);
            cJSON_AddNumberToObject(x, "samples_per_s", swept[i].samples_per_s);
            cJSON_AddItemToArray(s, x);
        }
    }
    char *text = cJSON_Print(root);
    snprintf(path, sizeof(path), "%s/report.json", o.out);
    if ((f = fopen(path, "w"))) {
        fprintf(f, "%s\n", text);
        fclose(f);
    }
    free(text);
    cJSON_Delete(root);
    snprintf(path, sizeof(path), "%s/report.svg", o.out);
    if ((f = fopen(path, "w"))) {
        write_svg(f, results, n_modes);
        fclose(f);
    }
    printf("ddp-compare: wrote %s/report.json, report.md and report.svg\n", o.out);
    config_free(&compare_spec, &o);
    return 0;
}
