/* ddp-compare: the same training in each sync mode, side by side.
 *
 *   ddp-compare -n 4 --modes dp,ddp --steps 100 --out DIR -- --model mlp
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
#include <unistd.h>

#include "common/atomic_file.h"
#include "common/config.h"
#include "common/limits.h"
#include "common/log.h"
#include "worker/tools/compare_report.h"
#include "worker/tools/launcher.h"
#include "worker/trainer/sync_modes.h"
#include "worker/trainer/worker_options.h"

static const char *const sync_modes[] = {SYNC_MODES(SYNC_MODE_STRING)}; /* the trainer's, sync_modes.h */
#define COMPARE_MAX_MODES (int)(sizeof(sync_modes) / sizeof(sync_modes[0]))
#define COMPARE_SWEEP 4
static const char *const transports[] = {"shm", "zmq", "nccl"}; /* ddp-worker's --transport, less auto */
#define COMPARE_MAX_TRANSPORTS (int)(sizeof(transports) / sizeof(transports[0]))
#define COMPARE_MAX_RUNS (COMPARE_MAX_MODES * COMPARE_MAX_TRANSPORTS)

typedef struct {
    int nproc;
    char *modes;
    char *transports;
    int steps, epochs;
    char *out;
    char *coordinator;
    bool sweep_buckets;
    bool help, version;
} compare_options;

static const config_option compare_table[] = {
    {"nproc", CONFIG_INT, 1, COMPARE_MAX_RANKS, "2", offsetof(compare_options, nproc), "workers per run", "N", NULL,
     NULL, 'n'},
    {"modes", CONFIG_STRING, 1, 64, NULL, offsetof(compare_options, modes),
     "sync modes to compare, comma-separated (default: every mode)", "LIST"},
    {"transports", CONFIG_STRING, 1, 32, NULL, offsetof(compare_options, transports),
     "run each mode over each of these data planes, comma-separated: shm, zmq, nccl (default: the worker's choice)",
     "LIST"},
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
    .usage = "-n N [--modes LIST] [--transports LIST] [--steps S | --epochs E] [--out DIR] [-- WORKER ARGS...]",
    .summary = "Runs the same training in each sync mode (and transport) and compares throughput, time, memory and "
               "traffic.",
    .env_prefix = "DDP_COMPARE_",
    .options = compare_table,
    .n_options = sizeof(compare_table) / sizeof(compare_table[0]),
};

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
        rr->forward_s = number(e, "forward_s");
        rr->backward_s = number(e, "backward_s");
        rr->optimizer_s = number(e, "optimizer_s");
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
            const cJSON *transport = cJSON_GetObjectItem(e, "transport");
            snprintf(m->transport, sizeof(m->transport), "%s", cJSON_IsString(transport) ? transport->valuestring : "");
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
                    const char *transport, double bucket_mb, const char *tag) {
    char metrics[4200], steps[32], epochs[32], bucket[32];
    snprintf(metrics, sizeof(metrics), "%s/%s-%%r.jsonl", o->out, tag);
    char **argv = calloc((size_t)n_extra + 16, sizeof(char *));
    int k = 0;
    argv[k++] = (char *)"ddp-worker";
    argv[k++] = (char *)"--mode";
    argv[k++] = (char *)mode;
    if (transport) {
        argv[k++] = (char *)"--transport";
        argv[k++] = (char *)transport;
    }
    argv[k++] = (char *)"--metrics";
    argv[k++] = metrics;
    /* both, so that neither comes from the worker's environment or config file */
    snprintf(steps, sizeof(steps), "%d", o->steps);
    snprintf(epochs, sizeof(epochs), "%d", o->epochs ? o->epochs : 1);
    argv[k++] = (char *)"--steps";
    argv[k++] = steps;
    argv[k++] = (char *)"--epochs";
    argv[k++] = epochs;
    for (int i = 0; i < n_extra; i++)
        argv[k++] = extra[i];
    if (bucket_mb > 0) { /* last, so that it wins over the worker args */
        snprintf(bucket, sizeof(bucket), "%g", bucket_mb);
        argv[k++] = (char *)"--bucket-mb";
        argv[k++] = bucket;
    }
    argv[k] = NULL;
    launcher_options launch = {
        .nproc = o->nproc, .coordinator = o->coordinator, .grace_ms = 5000, .program = program, .argv = argv};
    printf("ddp-compare: %s mode%s%s%s\n", mode, transport ? " over " : "", transport ? transport : "",
           bucket_mb > 0 ? " (bucket sweep)" : "");
    fflush(stdout);
    int code = 1;
    launcher_run(&launch, &code, NULL, NULL);
    free(argv);
    return code;
}

static int mode_index(const char *name) {
    for (int i = 0; i < COMPARE_MAX_MODES; i++)
        if (!strcmp(name, sync_modes[i]))
            return i;
    return -1;
}

/* --modes: each a sync mode, at most once; unset, every mode. */
static int parse_modes(const char *list, const char **names_out, int *ret_n) {
    char modes[80];
    bool seen[COMPARE_MAX_MODES] = {false};
    int n = 0;
    if (!list) {
        for (; n < COMPARE_MAX_MODES; n++)
            names_out[n] = sync_modes[n];
        *ret_n = n;
        return 0;
    }
    snprintf(modes, sizeof(modes), "%s", list);
    for (char *m = strtok(modes, ","); m; m = strtok(NULL, ",")) {
        int i = mode_index(m);
        if (i < 0 || seen[i]) {
            char names[80];
            sync_modes_describe(names, sizeof(names));
            fprintf(stderr, "ddp-compare: --modes: '%s' is not %s (each at most once)\n", m, names);
            return -EINVAL;
        }
        seen[i] = true;
        names_out[n++] = sync_modes[i];
    }
    if (n == 0) {
        char names[80];
        sync_modes_describe(names, sizeof(names));
        fprintf(stderr, "ddp-compare: --modes '%s' lists none of %s\n", list, names);
        return -EINVAL;
    }
    *ret_n = n;
    return 0;
}

/* --transports: each one of ddp-worker's, at most once; unset, none (the worker chooses). */
static int parse_transports(const char *list, const char **ret, int *ret_n) {
    char copy[40];
    int n = 0;
    if (!list) {
        *ret_n = 0;
        return 0;
    }
    snprintf(copy, sizeof(copy), "%s", list);
    for (char *t = strtok(copy, ","); t; t = strtok(NULL, ",")) {
        int i = 0;
        while (i < COMPARE_MAX_TRANSPORTS && strcmp(t, transports[i]))
            i++;
        bool seen = false;
        for (int k = 0; k < n && i < COMPARE_MAX_TRANSPORTS; k++)
            seen = seen || ret[k] == transports[i];
        if (i == COMPARE_MAX_TRANSPORTS || seen) {
            fprintf(stderr, "ddp-compare: --transports: '%s' is not shm, zmq or nccl (each at most once)\n", t);
            return -EINVAL;
        }
        ret[n++] = transports[i];
    }
    if (n == 0) {
        fprintf(stderr, "ddp-compare: --transports '%s' lists none of shm, zmq or nccl\n", list);
        return -EINVAL;
    }
    *ret_n = n;
    return 0;
}

/* The worker flags ddp-compare sets itself: one given after -- would override it (a dp run
 * reported as ddp, a run of other length, metrics elsewhere); and a checkpoint, which the
 * runs would share, from a flag, the worker's environment or its --config file. Flags are
 * read as the worker reads them (its table: getopt's abbreviations, a value that looks
 * like a flag). */
static int check_worker_args(char **extra, int n_extra, bool sets_transport) {
    static const char *const ours[] = {"mode", "metrics", "steps", "epochs", "transport"};
    const config_spec *worker = worker_options_spec();
    for (int i = 0; i < n_extra && strcmp(extra[i], "--") != 0; i++) {
        const config_option *opt = config_find_flag(worker, extra[i]);
        if (!opt)
            continue;
        for (size_t k = 0; k < sizeof(ours) / sizeof(ours[0]); k++)
            if (!strcmp(opt->name, ours[k]) && (strcmp(ours[k], "transport") != 0 || sets_transport)) {
                fprintf(stderr,
                        "ddp-compare: %.*s after --: ddp-compare sets it for each run (--%s; use --modes, "
                        "--transports, --steps or --epochs before --)\n",
                        (int)strcspn(extra[i], "="), extra[i], opt->name);
                return -EINVAL;
            }
        if (opt->type != CONFIG_BOOL && !strchr(extra[i], '='))
            i++; /* its value, whatever it looks like */
    }
    for (int i = 0; i < n_extra; i++)
        if (!strcmp(extra[i], "--")) { /* what follows would be operands, ddp-compare's flags too */
            fprintf(stderr, "ddp-compare: a second -- in the worker args: the workers take flags only\n");
            return -EINVAL;
        }
    /* what the worker will make of them all: argv as it gets it (getopt reorders a copy) */
    char **argv = calloc((size_t)n_extra + 2, sizeof(char *));
    if (!argv)
        return -ENOMEM;
    argv[0] = (char *)"ddp-worker";
    memcpy(argv + 1, extra, (size_t)n_extra * sizeof(char *));
    worker_options wo = {0};
    char err[512];
    int first = n_extra + 1;
    int r = config_load(worker, &wo, n_extra + 1, argv, &first, err, sizeof(err));
    if (r < 0)
        fprintf(stderr, "ddp-compare: the worker args after --: %s\n", err);
    else if (first <= n_extra || wo.help || wo.version) {
        fprintf(stderr, "ddp-compare: the worker args after --: %s: the workers would %s\n",
                first <= n_extra ? argv[first]
                : wo.help        ? "--help"
                                 : "--version",
                first <= n_extra ? "refuse it (flags only)" : "train nothing");
        r = -EINVAL;
    } else if (wo.checkpoint || wo.resume) {
        fprintf(stderr,
                "ddp-compare: the workers would be given %s%s (a flag after --, DDP_WORKER_CHECKPOINT, or their "
                "--config): every run would share it; ddp-compare's runs start afresh\n",
                wo.checkpoint ? "--checkpoint " : "--resume", wo.checkpoint ? wo.checkpoint : "");
        r = -EINVAL;
    }
    config_free(worker, &wo);
    free(argv);
    return r;
}

static const struct {
    const char *name;
    int (*render)(FILE *f, const compare_report *r);
} reports[] = {
    {"report.json", compare_write_json}, {"report.md", compare_write_markdown}, {"report.svg", compare_write_svg}};
#define N_REPORTS (sizeof(reports) / sizeof(reports[0]))

/* dir/name, replaced whole (a reader, or a run killed meanwhile, sees the old report or
 * the new, never half), or an error that says why (the writer's, or the disk's). */
static int write_report(const char *dir, const char *name, int (*render)(FILE *f, const compare_report *r),
                        const compare_report *report) {
    char path[4200], err[PATH_MAX + 256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    atomic_file af;
    int r = atomic_file_open(&af, path, 0644, "--out", err, sizeof(err));
    if (r < 0) {
        fprintf(stderr, "ddp-compare: %s\n", err);
        return r;
    }
    int fd = dup(af.fd); /* the FILE's own: the commit syncs and closes af.fd */
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        r = -errno;
        if (fd >= 0)
            close(fd);
    } else {
        r = render(f, report);
        if (fclose(f) != 0 && r == 0)
            r = -errno;
    }
    if (r < 0) {
        fprintf(stderr, "ddp-compare: cannot write %s: %s\n", path, strerror(-r));
        atomic_file_abort(&af);
        return r;
    }
    if ((r = atomic_file_commit(&af, "--out", err, sizeof(err))) < 0)
        fprintf(stderr, "ddp-compare: %s\n", err);
    return r;
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

    mode_result results[COMPARE_MAX_RUNS] = {0};
    const char *modes[COMPARE_MAX_MODES];
    const char *over[COMPARE_MAX_TRANSPORTS];
    int n_modes = 0, n_over = 0, code = 0;
    if ((r = parse_modes(o.modes, modes, &n_modes)) < 0 || (r = parse_transports(o.transports, over, &n_over)) < 0 ||
        (r = check_worker_args(extra, n_extra, n_over > 0)) < 0) {
        config_free(&compare_spec, &o);
        return 2;
    }
    struct stat st;
    if (stat(o.out, &st) == 0 && !S_ISDIR(st.st_mode)) { /* before any run, not after the first */
        fprintf(stderr, "ddp-compare: --out %s: exists and is not a directory\n", o.out);
        config_free(&compare_spec, &o);
        return 2;
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
    for (size_t i = 0; i < N_REPORTS; i++) { /* each report can replace what is there: before any run */
        char path[4200];
        snprintf(path, sizeof(path), "%s/%s", o.out, reports[i].name);
        if (atomic_file_check(path, "--out", err, sizeof(err)) < 0) {
            fprintf(stderr, "ddp-compare: %s\n", err);
            config_free(&compare_spec, &o);
            return 2;
        }
    }
    /* each mode over each transport, side by side; without --transports, once */
    int n_runs = 0;
    for (int i = 0; i < n_modes && code == 0; i++)
        for (int k = 0; k < (n_over ? n_over : 1) && code == 0; k++) {
            mode_result *run = &results[n_runs++];
            const char *transport = n_over ? over[k] : NULL;
            char tag[40];
            snprintf(tag, sizeof(tag), "%s%s%s", modes[i], transport ? "-" : "", transport ? transport : "");
            snprintf(run->mode, sizeof(run->mode), "%s", modes[i]);
            code = run_mode(&o, program, extra, n_extra, run->mode, transport, 0, tag);
            if (code == 0 && collect(o.out, tag, run, o.nproc, err, sizeof(err)) < 0) {
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
        code = run_mode(&o, program, extra, n_extra, "ddp", n_over ? over[0] : NULL, sweep[i], tag);
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

    compare_report report = {.world = o.nproc,
                             .modes = results,
                             .n_modes = n_runs,
                             .sweep = swept,
                             .n_sweep = o.sweep_buckets ? COMPARE_SWEEP : 0};
    compare_write_table(stdout, &report);
    for (size_t i = 0; i < N_REPORTS && code == 0; i++)
        if (write_report(o.out, reports[i].name, reports[i].render, &report) < 0)
            code = 1;
    if (code == 0)
        printf("ddp-compare: wrote %s/report.json, report.md and report.svg\n", o.out);
    config_free(&compare_spec, &o);
    return code;
}
