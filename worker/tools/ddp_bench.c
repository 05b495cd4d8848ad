/* ddp-bench: collective latency and bandwidth, reported like nccl-tests.
 *
 *   ddp-bench all_reduce -n 2 -b 4 -e 64M -f 4 [--dtype f32] [--op sum] [--check] [--json]
 *
 * Without RANK in the environment it launches N copies of itself (through the launcher,
 * with a private ddpd); rank 0 writes the table to ddp-bench's own stdout. Under ddp-run,
 * or started by hand with the torchrun variables, it is one rank. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/config.h"
#include "common/dtype.h"
#include "common/log.h"
#include "common/reduce.h"
#include "ddp/ddp.h"
#include "worker/tools/launcher.h"

#define BENCH_OUT_FD_ENV "DDP_REPORT_FD" /* where rank 0 writes the table */

typedef struct {
    int nproc;
    char *min_bytes, *max_bytes;
    int factor;
    char *dtype_name;
    char *op_name;
    int root;
    int iters, warmup;
    bool check;
    bool json;
    bool alloc;
    int cold_mb;
    char *coordinator;
    bool help, version;
} bench_options;

static const char *const dtype_choices[] = {"f32", "f64", "f16", "bf16", "i32", "i64", "u8", NULL};
static const char *const op_choices[] = {"sum", "prod", "min", "max", "avg", NULL};

static const config_option bench_table[] = {
    {"nproc", CONFIG_INT, 1, 1024, "2", offsetof(bench_options, nproc), "ranks to launch", "N", NULL, NULL, 'n'},
    {"minbytes", CONFIG_STRING, 1, 32, "4", offsetof(bench_options, min_bytes), "smallest size (K, M, G suffixes)",
     "SIZE", NULL, NULL, 'b'},
    {"maxbytes", CONFIG_STRING, 1, 32, "64M", offsetof(bench_options, max_bytes), "largest size", "SIZE", NULL, NULL,
     'e'},
    {"stepfactor", CONFIG_INT, 2, 1024, "4", offsetof(bench_options, factor), "multiply the size by this each row", "F",
     NULL, NULL, 'f'},
    {"dtype", CONFIG_STRING, 1, 8, "f32", offsetof(bench_options, dtype_name), "element type", "TYPE", dtype_choices},
    {"op", CONFIG_STRING, 1, 8, "sum", offsetof(bench_options, op_name), "reduction", "OP", op_choices},
    {"root", CONFIG_INT, 0, 1023, "0", offsetof(bench_options, root), "root of broadcast and reduce", "R"},
    {"iters", CONFIG_INT, 0, 1000000, "0", offsetof(bench_options, iters),
     "timed iterations per size; 0 picks by size (5..1000)", "K"},
    {"warmup", CONFIG_INT, 0, 1000, "3", offsetof(bench_options, warmup), "untimed iterations first", "W"},
    {"check", CONFIG_BOOL, 0, 1, NULL, offsetof(bench_options, check), "verify every result (#wrong column)"},
    {"json", CONFIG_BOOL, 0, 1, NULL, offsetof(bench_options, json), "print JSON instead of a table"},
    {"alloc", CONFIG_BOOL, 0, 1, NULL, offsetof(bench_options, alloc),
     "buffers from ddp_alloc: over shared memory the peers read the inputs in place"},
    {"cold", CONFIG_INT, 0, 4096, "0", offsetof(bench_options, cold_mb),
     "before each timed call, write MB MiB of other memory: the caches as a training step leaves them; time is "
     "then the calls' own",
     "MB"},
    {"coordinator", CONFIG_STRING, 1, 256, NULL, offsetof(bench_options, coordinator),
     "use this ddpd instead of a private one", "EP"},
    {"version", CONFIG_BOOL, 0, 1, NULL, offsetof(bench_options, version), "print the version and exit", NULL, NULL,
     NULL, 'V'},
    {"help", CONFIG_BOOL, 0, 1, NULL, offsetof(bench_options, help), "print this help and exit", NULL, NULL, NULL, 'h'},
};

static const config_spec bench_spec = {
    .program = "ddp-bench",
    .usage = "all_reduce|all_gather|reduce_scatter|broadcast|reduce|sendrecv [OPTIONS]",
    .summary = "Times a collective over sizes from -b to -e, like nccl-tests: time, algbw, busbw, p50/p99.",
    .env_prefix = "DDP_BENCH_",
    .options = bench_table,
    .n_options = sizeof(bench_table) / sizeof(bench_table[0]),
};

typedef enum { B_ALL_REDUCE, B_ALL_GATHER, B_REDUCE_SCATTER, B_BROADCAST, B_REDUCE, B_SENDRECV } bench_kind;
static const char *const kind_names[] = {"all_reduce", "all_gather", "reduce_scatter",
                                         "broadcast",  "reduce",     "sendrecv"};
#define BENCH_KINDS (int)(sizeof(kind_names) / sizeof(kind_names[0]))

static int parse_size(const char *s, uint64_t *ret) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    uint64_t mult = 1;
    if (*end == 'K' || *end == 'k')
        mult = 1ull << 10, end++;
    else if (*end == 'M' || *end == 'm')
        mult = 1ull << 20, end++;
    else if (*end == 'G' || *end == 'g')
        mult = 1ull << 30, end++;
    if (errno || end == s || *end || v == 0 || v > (1ull << 40) / mult)
        return -EINVAL;
    *ret = v * mult;
    return 0;
}

/* ---- one rank ---------------------------------------------------------------------- */

typedef struct {
    bench_kind kind;
    ddp_dtype t;
    ddp_op op;
    int root;
    size_t es;
    int rank, world;
    void *send, *recv;
} bench_ctx;

static int bench_call(ddp_group *g, const bench_ctx *c, uint64_t count) {
    switch (c->kind) {
    case B_ALL_REDUCE:
        return ddp_all_reduce(g, c->recv, count, c->t, c->op);
    case B_ALL_GATHER:
        return ddp_all_gather(g, c->send, c->recv, count, c->t);
    case B_REDUCE_SCATTER:
        return ddp_reduce_scatter(g, c->send, c->recv, count, c->t, c->op);
    case B_BROADCAST:
        return ddp_broadcast(g, c->recv, count, c->t, c->root);
    case B_REDUCE:
        return ddp_reduce(g, c->recv, count, c->t, c->op, c->root);
    case B_SENDRECV: { /* a round trip between ranks 0 and 1: rank 1 sends back what it got */
        int r = 0;
        if (c->rank == 0 && (r = ddp_send(g, c->send, count, c->t, 1, 0)) == 0)
            r = ddp_recv(g, c->recv, count, c->t, 1, 0);
        else if (c->rank == 1 && (r = ddp_recv(g, c->recv, count, c->t, 0, 0)) == 0)
            r = ddp_send(g, c->recv, count, c->t, 0, 0);
        return r;
    }
    }
    return -EINVAL;
}

/* Rank r's input: r + 1 everywhere, so every op has an easy exact answer in every dtype. */
static void bench_fill(const bench_ctx *c, void *buf, uint64_t n, int r) {
    for (uint64_t i = 0; i < n; i++) {
        float v = (float)(r + 1);
        switch (c->t) {
        case DDP_F32:
            ((float *)buf)[i] = v;
            break;
        case DDP_F64:
            ((double *)buf)[i] = v;
            break;
        case DDP_F16:
            ((uint16_t *)buf)[i] = float_to_half(v);
            break;
        case DDP_BF16:
            ((uint16_t *)buf)[i] = float_to_bf16(v);
            break;
        case DDP_I32:
            ((int32_t *)buf)[i] = (int32_t)v;
            break;
        case DDP_I64:
            ((int64_t *)buf)[i] = (int64_t)v;
            break;
        case DDP_U8:
            ((uint8_t *)buf)[i] = (uint8_t)v;
            break;
        }
    }
}

/* Runs the collective once more on known inputs and counts the wrong elements here. */
static long bench_check(ddp_group *g, const bench_ctx *c, uint64_t count) {
    int n = c->world;
    size_t bytes = count * c->es;
    bench_ctx in = *c;
    bench_fill(c, c->send, c->kind == B_REDUCE_SCATTER ? (uint64_t)n * count : count, c->rank);
    memcpy(c->recv, c->send, bytes);
    if (bench_call(g, &in, count) < 0)
        return -1;
    /* the expected value as rank-ordered reduction of 1..n in the same dtype */
    void *want = malloc(c->es), *x = malloc(c->es);
    if (!want || !x) {
        free(want);
        free(x);
        return -1;
    }
    bench_fill(c, want, 1, 0);
    for (int r = 1; r < n; r++) {
        bench_fill(c, x, 1, r);
        reduce_into(want, x, 1, (dtype)c->t, (reduce_op)c->op);
    }
    reduce_finish(want, 1, (dtype)c->t, (reduce_op)c->op, n);
    long wrong = 0;
    uint64_t check_n = c->kind == B_ALL_GATHER ? (uint64_t)n * count : count;
    bool reduced =
        c->kind == B_ALL_REDUCE || c->kind == B_REDUCE_SCATTER || (c->kind == B_REDUCE && c->rank == c->root);
    for (uint64_t i = 0; i < check_n; i++) {
        if (reduced) {
            wrong += memcmp((char *)c->recv + i * c->es, want, c->es) != 0;
        } else if (c->kind == B_ALL_GATHER || c->kind == B_BROADCAST || (c->kind == B_SENDRECV && c->rank < 2)) {
            /* sendrecv: ranks 0 and 1 both hold what rank 0 sent */
            bench_fill(c, x, 1, c->kind == B_ALL_GATHER ? (int)(i / count) : c->kind == B_SENDRECV ? 0 : c->root);
            wrong += memcmp((char *)c->recv + i * c->es, x, c->es) != 0;
        }
    }
    free(want);
    free(x);
    return wrong;
}

static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int bench_rank(const bench_options *o, bench_kind kind, uint64_t min_bytes, uint64_t max_bytes) {
    ddp_group *g;
    int r = ddp_init(NULL, &g);
    if (r < 0) {
        fprintf(stderr, "ddp-bench: %s: %s\n", ddp_strerror(r), ddp_last_error(NULL));
        return 1;
    }
    int fd = getenv(BENCH_OUT_FD_ENV) ? atoi(getenv(BENCH_OUT_FD_ENV)) : STDOUT_FILENO;
    FILE *out = ddp_rank(g) == 0 ? fdopen(dup(fd), "w") : NULL;
    bench_ctx c = {.kind = kind, .root = o->root, .rank = ddp_rank(g), .world = ddp_world_size(g)};
    for (int i = 0; dtype_choices[i]; i++)
        if (!strcmp(o->dtype_name, dtype_choices[i]))
            c.t = (ddp_dtype)i;
    for (int i = 0; op_choices[i]; i++)
        if (!strcmp(o->op_name, op_choices[i]))
            c.op = (ddp_op)i;
    c.es = dtype_size((dtype)c.t);
    if (c.root >= c.world) {
        fprintf(stderr, "ddp-bench: --root %d is not below the world size %d\n", c.root, c.world);
        ddp_finalize(g);
        return 2;
    }
    int n = c.world;
    bool per_rank_total = kind == B_ALL_GATHER || kind == B_REDUCE_SCATTER; /* size is all ranks' data */
    size_t alloc = (size_t)max_bytes + (size_t)n * c.es;
    c.send = o->alloc ? ddp_alloc(g, alloc) : calloc(1, alloc);
    c.recv = o->alloc ? ddp_alloc(g, alloc) : calloc(1, alloc);
    /* Every rank must have its buffers, or none goes on: a rank without them would leave
     * the others waiting in the first collective. */
    int32_t have = c.send && c.recv;
    if ((r = ddp_all_reduce(g, &have, 1, DDP_I32, DDP_MIN)) == 0 && !have) {
        fprintf(stderr, "ddp-bench: rank %d: %s two buffers of %zu bytes (-e %s)%s\n", c.rank,
                c.send && c.recv ? "another rank could not allocate" : "cannot allocate", alloc, o->max_bytes,
                c.send && c.recv ? "" : ": out of memory");
        r = -ENOMEM;
    }
    char *cold = o->cold_mb ? malloc((size_t)o->cold_mb << 20) : NULL;
    if (o->cold_mb && !cold && r == 0) {
        fprintf(stderr, "ddp-bench: rank %d: cannot allocate --cold %d MiB\n", c.rank, o->cold_mb);
        r = -ENOMEM;
    }
    double bus_factor = kind == B_ALL_REDUCE ? 2.0 * (n - 1) / n : per_rank_total ? (double)(n - 1) / n : 1.0;
    const char *type = dtype_choices[c.t], *redop = kind == B_ALL_GATHER || kind == B_BROADCAST ? "none" : o->op_name;
    int root = kind == B_BROADCAST || kind == B_REDUCE ? c.root : -1;
    if (out && !o->json && r == 0) {
        fprintf(out, "# ddp-bench %s, world %d over %s, %s, %s, warmup %d, iters %s\n#\n", kind_names[kind], n,
                ddp_transport(g), type, redop, o->warmup, o->iters ? "fixed" : "by size");
        fprintf(out, "# %10s %12s %6s %6s %5s %10s %10s %10s %7s %10s %10s\n", "size", "count", "type", "redop", "root",
                "time(us)", "algbw", "busbw", "#wrong", "p50(us)", "p99(us)");
        fprintf(out, "# %10s %12s %6s %6s %5s %10s %10s %10s %7s %10s %10s\n", "(B)", "(elements)", "", "", "", "",
                "(GB/s)", "(GB/s)", "", "", "");
    }
    bool opened = out && o->json && r == 0; /* the JSON object, closed at the end */
    if (opened)
        fprintf(out,
                "{\"collective\": \"%s\", \"world\": %d, \"transport\": \"%s\", \"dtype\": \"%s\", \"op\": \"%s\", "
                "\"rows\": [",
                kind_names[kind], n, ddp_transport(g), type, redop);
    double bus_sum = 0;
    int rows = 0;
    long all_wrong = 0; /* over every size: the footer's and the exit code's */
    for (uint64_t size = min_bytes; size <= max_bytes && r == 0; size *= (uint64_t)o->factor) {
        uint64_t count = size / c.es / (per_rank_total ? (uint64_t)n : 1);
        if (count == 0)
            continue;
        /* what the call moves (size rounded down to whole elements, per rank where counts are) */
        uint64_t bytes = count * c.es * (per_rank_total ? (uint64_t)n : 1);
        int iters = o->iters ? o->iters : (int)fmax(5, fmin(1000, 2e8 / (double)size / 20));
        double *lat = calloc((size_t)iters, sizeof(double));
        if (!lat) {
            fprintf(stderr, "ddp-bench: out of memory for %d timings\n", iters);
            r = -ENOMEM;
            break;
        }
        bench_fill(&c, c.send, per_rank_total ? (uint64_t)n * count : count, c.rank);
        bench_fill(&c, c.recv, per_rank_total ? (uint64_t)n * count : count, c.rank);
        for (int i = 0; i < o->warmup && r == 0; i++)
            r = bench_call(g, &c, count);
        if (r == 0)
            r = ddp_barrier(g);
        uint64_t t0 = clock_now_us();
        double calls_us = 0;
        for (int i = 0; i < iters && r == 0; i++) {
            if (cold) /* evicts the buffers, as forward and backward do between all-reduces */
                memset(cold, i, (size_t)o->cold_mb << 20);
            uint64_t s = clock_now_ns(); /* a call may take less than a microsecond */
            r = bench_call(g, &c, count);
            lat[i] = (double)(clock_now_ns() - s) / 1e3;
            calls_us += lat[i];
        }
        double avg = (cold ? calls_us : (double)(clock_now_us() - t0)) / iters;
        if (kind == B_SENDRECV) { /* one way: half the round trip */
            avg /= 2;
            for (int i = 0; i < iters; i++)
                lat[i] /= 2;
        }
        if (r == 0) /* the slowest rank's average, as nccl-tests and the gloo anchor report */
            r = ddp_all_reduce(g, &avg, 1, DDP_F64, DDP_MAX);
        long wrong = 0;
        if (r == 0 && o->check) {
            wrong = bench_check(g, &c, count);
            int64_t w = wrong;
            if (wrong < 0 || (r = ddp_all_reduce(g, &w, 1, DDP_I64, DDP_SUM)) < 0)
                r = r ? r : -EIO;
            wrong = (long)w;
        }
        if (r < 0) {
            fprintf(stderr, "ddp-bench: rank %d: %s at %llu bytes: %s\n", c.rank, ddp_strerror(r),
                    (unsigned long long)size, ddp_last_error(g));
            free(lat);
            break;
        }
        qsort(lat, (size_t)iters, sizeof(double), compare_double);
        /* nearest rank: the p99 of 5 calls is the slowest; rank 0's own calls */
        double p50 = lat[(size_t)ceil(0.5 * iters) - 1], p99 = lat[(size_t)ceil(0.99 * iters) - 1];
        double algbw = (double)bytes / avg / 1e3, busbw = algbw * bus_factor;
        all_wrong += wrong;
        bus_sum += busbw;
        rows++;
        if (out && !o->json) {
            char wrong_text[16] = "N/A";
            if (o->check)
                snprintf(wrong_text, sizeof(wrong_text), "%ld", wrong);
            fprintf(out, "  %10llu %12llu %6s %6s %5d %10.1f %10.3f %10.3f %7s %10.1f %10.1f\n",
                    (unsigned long long)bytes, (unsigned long long)count, type, redop, root, avg, algbw, busbw,
                    wrong_text, p50, p99);
            fflush(out);
        } else if (out)
            fprintf(out,
                    "%s\n  {\"bytes\": %llu, \"count\": %llu, \"time_us\": %.3f, \"algbw_gbps\": %.4f, "
                    "\"busbw_gbps\": %.4f, \"wrong\": %ld, \"p50_us\": %.3f, \"p99_us\": %.3f}",
                    rows > 1 ? "," : "", (unsigned long long)bytes, (unsigned long long)count, avg, algbw, busbw,
                    o->check ? wrong : -1, p50, p99);
        free(lat);
    }
    if (out && !o->json && r == 0) {
        if (o->check)
            fprintf(out, "# Out of bounds values : %ld %s\n", all_wrong, all_wrong ? "FAILED" : "OK");
        else
            fprintf(out, "# Out of bounds values : N/A (no --check)\n");
        fprintf(out, "# Avg bus bandwidth    : %.4f\n#\n", rows ? bus_sum / rows : 0);
    }
    if (opened)
        fprintf(out, "\n], \"wrong\": %ld, \"avg_busbw_gbps\": %.4f}\n", o->check ? all_wrong : -1,
                rows ? bus_sum / rows : 0);
    if (out)
        fclose(out);
    free(cold);
    if (o->alloc) { /* ddp_finalize would free them too */
        ddp_free(g, c.send);
        ddp_free(g, c.recv);
    } else {
        free(c.send);
        free(c.recv);
    }
    ddp_finalize(g);
    if (r == 0 && all_wrong && c.rank == 0) /* summed over the ranks: every rank exits 1 */
        fprintf(stderr, "ddp-bench: rank %d: %ld elements differ from the expected results\n", c.rank, all_wrong);
    return r < 0 || all_wrong ? 1 : 0;
}

/* ---- the launching side ------------------------------------------------------------ */

static int bench_launch(const bench_options *o, int argc, char **argv) {
    char dir[PATH_MAX], self[PATH_MAX + 16], fd_text[32];
    if (launcher_self_dir(dir, sizeof(dir)) < 0) {
        fprintf(stderr, "ddp-bench: cannot find its own executable\n");
        return 1;
    }
    snprintf(self, sizeof(self), "%s/ddp-bench", dir);
    /* Rank 0 writes straight to our stdout, past the launcher's "[rank 0]" prefixes. */
    int fd = dup(STDOUT_FILENO);
    snprintf(fd_text, sizeof(fd_text), "%d", fd);
    setenv(BENCH_OUT_FD_ENV, fd_text, 1);
    char **args = calloc((size_t)argc + 1, sizeof(char *));
    for (int i = 0; i < argc; i++)
        args[i] = argv[i];
    launcher_options launch = {
        .nproc = o->nproc,
        .coordinator = o->coordinator,
        .grace_ms = 5000,
        .program = self,
        .argv = args,
    };
    int exit_code = 1;
    launcher_run(&launch, &exit_code, NULL, NULL);
    free(args);
    close(fd);
    return exit_code;
}

int main(int argc, char **argv) {
    bench_options o = {0};
    char err[512];
    int first = argc;
    int r = config_load(&bench_spec, &o, argc, argv, &first, err, sizeof(err));
    int code = 0;
    uint64_t min_bytes = 0, max_bytes = 0;
    bench_kind kind = B_ALL_REDUCE;
    if (r < 0) {
        fprintf(stderr, "ddp-bench: %s\n", err);
        code = 2;
        goto out;
    }
    if (o.help || o.version) {
        if (o.version)
            printf("ddp-bench %s\n", DDP_VERSION);
        else
            config_print_help(&bench_spec, stdout);
        goto out;
    }
    bool found = false;
    for (int i = 0; first < argc && i < BENCH_KINDS; i++)
        if (!strcmp(argv[first], kind_names[i])) {
            kind = (bench_kind)i;
            found = true;
        }
    if (!found || first + 1 < argc) {
        fprintf(stderr, "ddp-bench: name one collective: all_reduce, all_gather, reduce_scatter, broadcast, reduce or "
                        "sendrecv\n");
        code = 2;
        goto out;
    }
    if (parse_size(o.min_bytes, &min_bytes) < 0 || parse_size(o.max_bytes, &max_bytes) < 0 || min_bytes > max_bytes) {
        fprintf(stderr, "ddp-bench: -b %s -e %s: sizes are 1..1T bytes with K, M or G, and -b <= -e\n", o.min_bytes,
                o.max_bytes);
        code = 2;
        goto out;
    }
    if ((!strcmp(o.op_name, "avg")) &&
        (!strcmp(o.dtype_name, "i32") || !strcmp(o.dtype_name, "i64") || !strcmp(o.dtype_name, "u8"))) {
        fprintf(stderr, "ddp-bench: --op avg needs a floating-point --dtype\n");
        code = 2;
        goto out;
    }
    log_set_prefix("ddp-bench");
    log_set_level(LOG_LEVEL_WARN);
    code = getenv("RANK") ? bench_rank(&o, kind, min_bytes, max_bytes) : bench_launch(&o, argc, argv);
out:
    config_free(&bench_spec, &o);
    return code;
}
