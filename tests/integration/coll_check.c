/* Checks every collective against a serial reference, as one rank of a group formed from
 * the environment (run N of them under ddpd, or with ddp-run):
 *   coll_check [--counts 0,1,7,1000,1048579] [--dtypes f32,...] [--async K] [--alloc 1]
 * For each count, dtype and op it runs all_reduce, reduce, reduce_scatter, broadcast,
 * gather, scatter, all_gather and send/recv. Every rank can compute every rank's input, so
 * each checks its own result: integers exactly, floats within a tolerance for their
 * precision. All-reduce results are hashed and all-gathered to check that every rank holds
 * the same bits, and digested: the same inputs must give the same digest on every run.
 * With --alloc 1 every buffer comes from ddp_alloc, 16 bytes into it (the peers read the
 * inputs in place, at an offset). Prints "coll_check: rank R uses T" (its transport), one line per failure,
 * "coll_check: digest of rank R: D" and
 * "coll_check: rank R: P passed, F failed". */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/dtype.h"
#include "ddp/ddp.h"

static int rank, world;
static bool use_alloc; /* --alloc: buffers from ddp_alloc */

#define ALLOC_SKIP 16 /* where a buffer starts in its allocation: not at the region's start */

/* bytes for a call's buffer, from ddp_alloc (every rank, in the same order) or malloc. */
static void *buffer(ddp_group *g, size_t bytes) {
    if (!use_alloc)
        return malloc(bytes);
    char *p = ddp_alloc(g, bytes + ALLOC_SKIP);
    if (!p) {
        printf("FAIL ddp_alloc(%zu): %s\n", bytes + ALLOC_SKIP, ddp_last_error(g));
        exit(1);
    }
    return p + ALLOC_SKIP;
}

static void release(ddp_group *g, void *p) {
    if (!use_alloc) {
        free(p);
        return;
    }
    int r = ddp_free(g, (char *)p - ALLOC_SKIP);
    if (r < 0) {
        printf("FAIL ddp_free: %s\n", ddp_last_error(g));
        exit(1);
    }
}
static long passed, failed;
static const char *const dtype_names[] = {"f32", "f64", "f16", "bf16", "i32", "i64", "u8"};
static const char *const op_names[] = {"sum", "prod", "min", "max", "avg"};

/* Rank r's element i: small values so that products of 8 stay in range, with eighths for
 * the floats so that rounding is exercised. */
static double input_value(int r, uint64_t i, ddp_dtype t) {
    double v = (double)((i * 7 + (uint64_t)r * 3) % 5);
    if (t == DDP_U8)
        return v;
    v -= 2;
    if (t == DDP_F32 || t == DDP_F64 || t == DDP_F16 || t == DDP_BF16)
        v += 0.125 * (double)((i + (uint64_t)r) % 3);
    return v;
}

static void store(void *buf, uint64_t i, ddp_dtype t, double v) {
    switch (t) {
    case DDP_F32:
        ((float *)buf)[i] = (float)v;
        break;
    case DDP_F64:
        ((double *)buf)[i] = v;
        break;
    case DDP_F16:
        ((uint16_t *)buf)[i] = float_to_half((float)v);
        break;
    case DDP_BF16:
        ((uint16_t *)buf)[i] = float_to_bf16((float)v);
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

static double load(const void *buf, uint64_t i, ddp_dtype t) {
    switch (t) {
    case DDP_F32:
        return ((const float *)buf)[i];
    case DDP_F64:
        return ((const double *)buf)[i];
    case DDP_F16:
        return half_to_float(((const uint16_t *)buf)[i]);
    case DDP_BF16:
        return bf16_to_float(((const uint16_t *)buf)[i]);
    case DDP_I32:
        return ((const int32_t *)buf)[i];
    case DDP_I64:
        return (double)((const int64_t *)buf)[i];
    case DDP_U8:
        return ((const uint8_t *)buf)[i];
    }
    return 0;
}

static bool is_float(ddp_dtype t) {
    return t == DDP_F32 || t == DDP_F64 || t == DDP_F16 || t == DDP_BF16;
}

/* The reduction of element i over ranks 0..world-1, in double; u8 wraps as it does on the wire. */
static double reference(uint64_t i, ddp_dtype t, ddp_op op) {
    double acc = input_value(0, i, t);
    for (int r = 1; r < world; r++) {
        double x = input_value(r, i, t);
        switch (op) {
        case DDP_SUM:
        case DDP_AVG:
            acc += x;
            break;
        case DDP_PROD:
            acc *= x;
            break;
        case DDP_MIN:
            acc = x < acc ? x : acc;
            break;
        case DDP_MAX:
            acc = x > acc ? x : acc;
            break;
        }
        if (t == DDP_U8)
            acc = (double)(uint8_t)(unsigned)acc;
    }
    return op == DDP_AVG ? acc / world : acc;
}

static bool close_enough(double got, double want, ddp_dtype t) {
    if (!is_float(t))
        return got == want;
    double tol = t == DDP_F64 ? 1e-12 : t == DDP_F32 ? 1e-5 : t == DDP_F16 ? 1e-2 : 5e-2;
    return fabs(got - want) <= tol * (fabs(want) > 1 ? fabs(want) : 1);
}

static void check(bool ok, const char *what, uint64_t count, ddp_dtype t, int op, const char *detail) {
    if (ok) {
        passed++;
        return;
    }
    failed++;
    printf("FAIL rank %d world %d: %s count %llu %s%s%s: %s\n", rank, world, what, (unsigned long long)count,
           dtype_names[t], op >= 0 ? " " : "", op >= 0 ? op_names[op] : "", detail);
}

static void check_call(int r, ddp_group *g, const char *what, uint64_t count, ddp_dtype t, int op) {
    if (r == 0)
        return;
    char detail[600];
    snprintf(detail, sizeof(detail), "returned %d (%s): %s", r, ddp_strerror(r), ddp_last_error(g));
    check(false, what, count, t, op, detail);
    printf("coll_check: rank %d: %ld passed, %ld failed\n", rank, passed, failed);
    exit(1); /* the group is unusable after a failed collective */
}

/* Compares buf[0..n) with want(i), reporting the first difference. */
#define EXPECT_ELEMENTS(what, count, t, op, n, buf, want_expr)                                                         \
    do {                                                                                                               \
        char detail_[160] = "";                                                                                        \
        for (uint64_t i = 0; i < (n) && !detail_[0]; i++) {                                                            \
            double want_ = (want_expr), got_ = load((buf), i, (t));                                                    \
            if (!close_enough(got_, want_, (t)))                                                                       \
                snprintf(detail_, sizeof(detail_), "element %llu is %g, expected %g", (unsigned long long)i, got_,     \
                         want_);                                                                                       \
        }                                                                                                              \
        check(!detail_[0], (what), (count), (t), (op), detail_);                                                       \
    } while (0)

static uint64_t digest = 1469598103934665603ull; /* of every all_reduce result, in order */

static uint64_t fnv1a_from(uint64_t h, const void *buf, size_t n) {
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const uint8_t *)buf)[i]) * 1099511628211ull;
    return h;
}

static uint64_t fnv1a(const void *buf, size_t n) {
    return fnv1a_from(1469598103934665603ull, buf, n);
}

/* Every rank must hold the same bits: gather the hashes everywhere and compare. */
static void check_identical(ddp_group *g, const void *buf, size_t bytes, const char *what, uint64_t count, ddp_dtype t,
                            int op) {
    uint64_t mine = fnv1a(buf, bytes), *all = calloc((size_t)world, sizeof(uint64_t));
    check_call(ddp_all_gather(g, &mine, all, 1, DDP_I64), g, "all_gather of hashes", 1, DDP_I64, -1);
    bool same = true;
    for (int r = 0; r < world; r++)
        same = same && all[r] == all[0];
    check(same, what, count, t, op, "ranks hold different bits");
    free(all);
}

static void fill_input(void *buf, int r, uint64_t n, ddp_dtype t) {
    for (uint64_t i = 0; i < n; i++)
        store(buf, i, t, input_value(r, i, t));
}

static void run_reductions(ddp_group *g, uint64_t count, ddp_dtype t, size_t es, int root) {
    void *buf = buffer(g, count * es + 1), *big = buffer(g, (size_t)world * count * es + 1),
         *out = buffer(g, count * es + 1);
    for (int op = DDP_SUM; op <= DDP_AVG; op++) {
        if (op == DDP_AVG && !is_float(t)) {
            int r = ddp_all_reduce(g, buf, count, t, DDP_AVG);
            check(r == -EINVAL, "all_reduce avg on integers", count, t, op, "not refused with -EINVAL");
            continue;
        }
        fill_input(buf, rank, count, t);
        check_call(ddp_all_reduce(g, buf, count, t, (ddp_op)op), g, "all_reduce", count, t, op);
        EXPECT_ELEMENTS("all_reduce", count, t, op, count, buf, reference(i, t, (ddp_op)op));
        check_identical(g, buf, count * es, "all_reduce", count, t, op);
        digest = fnv1a_from(digest, buf, count * es);

        fill_input(buf, rank, count, t);
        check_call(ddp_reduce(g, buf, count, t, (ddp_op)op, root), g, "reduce", count, t, op);
        if (rank == root)
            EXPECT_ELEMENTS("reduce at the root", count, t, op, count, buf, reference(i, t, (ddp_op)op));
        else
            EXPECT_ELEMENTS("reduce leaves other ranks' buffers", count, t, op, count, buf, input_value(rank, i, t));

        /* reduce_scatter: block k of rank r's input is input_value(r, k*count + i) */
        fill_input(big, rank, (uint64_t)world * count, t);
        check_call(ddp_reduce_scatter(g, big, out, count, t, (ddp_op)op), g, "reduce_scatter", count, t, op);
        EXPECT_ELEMENTS("reduce_scatter", count, t, op, count, out,
                        reference((uint64_t)rank * count + i, t, (ddp_op)op));
        /* in place: recv is this rank's part of send */
        fill_input(big, rank, (uint64_t)world * count, t);
        char *own = (char *)big + (size_t)rank * count * es;
        check_call(ddp_reduce_scatter(g, big, own, count, t, (ddp_op)op), g, "reduce_scatter in place", count, t, op);
        EXPECT_ELEMENTS("reduce_scatter in place", count, t, op, count, own,
                        reference((uint64_t)rank * count + i, t, (ddp_op)op));
    }
    release(g, buf);
    release(g, big);
    release(g, out);
}

static void run_data_movement(ddp_group *g, uint64_t count, ddp_dtype t, size_t es, int root) {
    size_t bytes = count * es, all = (size_t)world * bytes;
    char *buf = buffer(g, bytes + 1), *big = buffer(g, all + 1), *mine = buffer(g, bytes + 1);

    fill_input(buf, rank, count, t);
    if (rank != root)
        memset(buf, 0, bytes);
    check_call(ddp_broadcast(g, buf, count, t, root), g, "broadcast", count, t, -1);
    EXPECT_ELEMENTS("broadcast", count, t, -1, count, buf, input_value(root, i, t));

    fill_input(mine, rank, count, t);
    memset(big, 0, all);
    check_call(ddp_gather(g, mine, rank == root ? big : NULL, count, t, root), g, "gather", count, t, -1);
    if (rank == root)
        EXPECT_ELEMENTS("gather", count, t, -1, (uint64_t)world * count, big,
                        input_value((int)(i / count), i % count, t));

    if (rank == root) /* block k is rank k's input */
        for (int k = 0; k < world; k++)
            fill_input(big + (size_t)k * bytes, k, count, t);
    memset(buf, 0, bytes);
    check_call(ddp_scatter(g, rank == root ? big : NULL, buf, count, t, root), g, "scatter", count, t, -1);
    EXPECT_ELEMENTS("scatter", count, t, -1, count, buf, input_value(rank, i, t));

    memset(big, 0, all);
    check_call(ddp_all_gather(g, mine, big, count, t), g, "all_gather", count, t, -1);
    EXPECT_ELEMENTS("all_gather", count, t, -1, (uint64_t)world * count, big,
                    input_value((int)(i / count), i % count, t));

    /* in place (MPI_IN_PLACE's forms): this rank's part of the buffer of all is its own */
    char *own = big + (size_t)rank * bytes;
    memset(big, 0, all);
    fill_input(rank == root ? big + (size_t)root * bytes : mine, rank, count, t);
    check_call(
        ddp_gather(g, rank == root ? big + (size_t)root * bytes : mine, rank == root ? big : NULL, count, t, root), g,
        "gather in place", count, t, -1);
    if (rank == root)
        EXPECT_ELEMENTS("gather in place", count, t, -1, (uint64_t)world * count, big,
                        input_value((int)(i / count), i % count, t));
    if (rank == root)
        for (int k = 0; k < world; k++)
            fill_input(big + (size_t)k * bytes, k, count, t);
    else
        memset(buf, 0, bytes);
    char *scattered = rank == root ? big + (size_t)root * bytes : buf;
    check_call(ddp_scatter(g, rank == root ? big : NULL, scattered, count, t, root), g, "scatter in place", count, t,
               -1);
    EXPECT_ELEMENTS("scatter in place", count, t, -1, count, scattered, input_value(rank, i, t));
    memset(big, 0, all);
    fill_input(own, rank, count, t);
    check_call(ddp_all_gather(g, own, big, count, t), g, "all_gather in place", count, t, -1);
    EXPECT_ELEMENTS("all_gather in place", count, t, -1, (uint64_t)world * count, big,
                    input_value((int)(i / count), i % count, t));
    if (count > 1 && world > 1) { /* any other overlap is refused on every rank, before the call is made */
        int r = ddp_all_gather(g, big + es, big, count, t);
        check(r == -EINVAL && strstr(ddp_last_error(g), "overlap"), "all_gather overlapping", count, t, -1,
              "not refused with -EINVAL naming the overlap");
    }
    if (count > 0 && rank == 1) { /* one buffer for both is in place at rank 0 only: refused before any peer is met */
        int r = ddp_all_gather(g, big, big, count, t);
        check(r == -EINVAL && strstr(ddp_last_error(g), "overlap"), "all_gather with send == recv at rank 1", count, t,
              -1, "not refused with -EINVAL naming the overlap");
    }

    /* send/recv round the ring, with two tags sent in one order and received in the other */
    if (world > 1) {
        int right = (rank + 1) % world, left = (rank + world - 1) % world;
        fill_input(mine, rank, count, t);
        check_call(ddp_send(g, mine, count, t, right, 7), g, "send", count, t, -1);
        check_call(ddp_send(g, mine, count > 0 ? count - 1 : 0, t, right, 8), g, "send", count, t, -1);
        check_call(ddp_recv(g, buf, count > 0 ? count - 1 : 0, t, left, 8), g, "recv tag 8", count, t, -1);
        EXPECT_ELEMENTS("recv tag 8", count, t, -1, count > 0 ? count - 1 : 0, buf, input_value(left, i, t));
        check_call(ddp_recv(g, buf, count, t, left, 7), g, "recv tag 7", count, t, -1);
        EXPECT_ELEMENTS("recv tag 7", count, t, -1, count, buf, input_value(left, i, t));
    }
    release(g, buf);
    release(g, big);
    release(g, mine);
}

/* Many messages from rank 0 to rank 1, more than a mailbox holds, of two tags sent
 * interleaved: rank 1 takes every tag-1 message first (the tag-0 ones wait aside), then
 * the tag-0 ones; each in the order sent. Rank 0 is held while the mailbox is full. */
static void run_flood(ddp_group *g) {
    enum { MESSAGES = 1200, COUNT = 256 }; /* 1 KiB each: 1.2 MiB in all */
    int32_t buf[COUNT];
    if (rank == 0) {
        for (int m = 0; m < MESSAGES; m++) {
            for (int i = 0; i < COUNT; i++)
                buf[i] = m * COUNT + i;
            check_call(ddp_send(g, buf, COUNT, DDP_I32, 1, m % 2), g, "flood send", COUNT, DDP_I32, -1);
        }
    } else if (rank == 1) {
        for (int tag = 1; tag >= 0; tag--)
            for (int m = tag; m < MESSAGES; m += 2) {
                check_call(ddp_recv(g, buf, COUNT, DDP_I32, 0, tag), g, "flood recv", COUNT, DDP_I32, -1);
                EXPECT_ELEMENTS("flood recv", COUNT, DDP_I32, -1, COUNT, buf, (double)(m * COUNT + (int)i));
            }
    }
}

/* Ranks 2k and 2k+1 each send the other more than a mailbox holds before either
 * receives: neither may wait on the other for room (a full mailbox's sender copies out
 * what arrives meanwhile). Once in one message, once in eight that each travel in the
 * mailbox's ring; and an empty message each way, which is a message too. */
static void run_exchange(ddp_group *g) {
    enum { COUNT = 300000, SMALL = 15000, SMALLS = 8 }; /* 1.2 MiB; 60 KB */
    int peer = rank ^ 1;
    if (peer >= world)
        return;
    int32_t *out = malloc(COUNT * sizeof(int32_t)), *in = malloc(COUNT * sizeof(int32_t));
    for (int i = 0; i < COUNT; i++)
        out[i] = rank * COUNT + i;
    check_call(ddp_send(g, out, COUNT, DDP_I32, peer, 3), g, "exchange send", COUNT, DDP_I32, -1);
    check_call(ddp_recv(g, in, COUNT, DDP_I32, peer, 3), g, "exchange recv", COUNT, DDP_I32, -1);
    EXPECT_ELEMENTS("exchange recv", COUNT, DDP_I32, -1, COUNT, in, (double)(peer * COUNT + (int)i));
    for (int m = 0; m < SMALLS; m++) {
        for (int i = 0; i < SMALL; i++)
            out[i] = (rank * SMALLS + m) * SMALL + i;
        check_call(ddp_send(g, out, SMALL, DDP_I32, peer, 4), g, "exchange send (small)", SMALL, DDP_I32, -1);
    }
    /* ddp_probe: the peer's messages of tag 4 come (it sent them before it receives); of
     * tag 99 none ever does */
    int probed = 0;
    for (time_t until = time(NULL) + 20; probed == 0 && time(NULL) < until;)
        probed = ddp_probe(g, peer, 4);
    check(probed == 1, "probe (tag 4: sent)", SMALL, DDP_I32, -1, ddp_last_error(g));
    check(ddp_probe(g, peer, 99) == 0, "probe (tag 99: never sent)", 0, DDP_I32, -1, ddp_last_error(g));
    for (int m = 0; m < SMALLS; m++) {
        check_call(ddp_recv(g, in, SMALL, DDP_I32, peer, 4), g, "exchange recv (small)", SMALL, DDP_I32, -1);
        EXPECT_ELEMENTS("exchange recv (small)", SMALL, DDP_I32, -1, SMALL, in,
                        (double)((peer * SMALLS + m) * SMALL + (int)i));
    }
    check_call(ddp_send(g, out, 0, DDP_I32, peer, 5), g, "exchange send (empty)", 0, DDP_I32, -1);
    check_call(ddp_recv(g, in, 0, DDP_I32, peer, 5), g, "exchange recv (empty)", 0, DDP_I32, -1);
    free(out);
    free(in);
}

/* Several all-reduces in flight at once, overlapped with work on this thread. */
static void run_async(ddp_group *g, int k) {
    uint64_t count = 300000;
    float **bufs = calloc((size_t)k, sizeof(float *));
    ddp_request **reqs = calloc((size_t)k, sizeof(ddp_request *));
    for (int j = 0; j < k; j++) {
        bufs[j] = malloc(count * sizeof(float));
        for (uint64_t i = 0; i < count; i++)
            bufs[j][i] = (float)(rank + j);
        check_call(ddp_all_reduce_async(g, bufs[j], count, DDP_F32, DDP_SUM, &reqs[j]), g, "all_reduce_async", count,
                   DDP_F32, DDP_SUM);
    }
    volatile double busy = 0; /* the caller computes meanwhile */
    for (int i = 0; i < 2000000; i++)
        busy += i * 0.5;
    for (int j = 0; j < k; j++) {
        check_call(ddp_wait(reqs[j]), g, "wait", count, DDP_F32, DDP_SUM);
        double want = (double)world * (world - 1) / 2 + (double)world * j;
        EXPECT_ELEMENTS("all_reduce_async", count, DDP_F32, DDP_SUM, count, bufs[j], want);
        free(bufs[j]);
    }
    free(bufs);
    free(reqs);
}

int main(int argc, char **argv) {
    const char *counts_arg = "0,1,7,1000,1048579", *dtypes_arg = "f32,f64,f16,bf16,i32,i64,u8";
    int async = 4;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--counts"))
            counts_arg = argv[i + 1];
        else if (!strcmp(argv[i], "--dtypes"))
            dtypes_arg = argv[i + 1];
        else if (!strcmp(argv[i], "--async"))
            async = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--alloc"))
            use_alloc = atoi(argv[i + 1]) != 0;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    ddp_group *g;
    int r = ddp_init(NULL, &g);
    if (r < 0) {
        printf("init failed: %s: %s\n", ddp_strerror(r), ddp_last_error(NULL));
        return 2;
    }
    rank = ddp_rank(g);
    world = ddp_world_size(g);
    printf("coll_check: rank %d uses %s\n", rank, ddp_transport(g));

    char counts[256];
    snprintf(counts, sizeof(counts), "%s", counts_arg);
    int round = 0;
    for (char *c = strtok(counts, ","); c; c = strtok(NULL, ",")) {
        uint64_t count = strtoull(c, NULL, 10);
        for (int t = DDP_F32; t <= DDP_U8; t++) {
            if (!strstr(dtypes_arg, dtype_names[t]))
                continue;
            size_t es = dtype_size((dtype)t);
            int root = round++ % world; /* move the root around */
            run_reductions(g, count, (ddp_dtype)t, es, root);
            run_data_movement(g, count, (ddp_dtype)t, es, root);
        }
    }
    if (async > 0)
        run_async(g, async);
    if (world > 1) {
        run_flood(g);
        run_exchange(g);
    }
    check_call(ddp_barrier(g), g, "barrier", 0, DDP_F32, -1);
    /* Same inputs, same bits on every run: the tests compare this line across runs. */
    printf("coll_check: digest of rank %d: %016llx\n", rank, (unsigned long long)digest);
    printf("coll_check: rank %d: %ld passed, %ld failed\n", rank, passed, failed);
    /* one request nobody waits for: ddp_finalize runs and frees it (LeakSanitizer's runs see) */
    float *unwaited = calloc(1000, sizeof(float));
    ddp_request *never;
    check_call(ddp_all_reduce_async(g, unwaited, 1000, DDP_F32, DDP_SUM, &never), g, "all_reduce_async (unwaited)",
               1000, DDP_F32, DDP_SUM);
    ddp_finalize(g);
    free(unwaited);
    return failed ? 1 : 0;
}
