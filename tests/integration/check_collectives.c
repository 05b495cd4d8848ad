/* libddp's collectives on real ranks over loopback, launched with ddp-run. */
#include <check.h>
#include <dirent.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "tests/check_main.h"
#include "tests/integration/harness.h"

#define WAIT_MS 240000     /* one launch, at most */
#define CASE_TIMEOUT_S 270 /* a case, at most; under CTest's 300 s (tests/CMakeLists.txt) */

/* Runs ddp-run -n n -- program args..., returns its exit code; output stays in p. */
static int run(proc *p, int n, const char *const *program) {
    char n_text[8];
    snprintf(n_text, sizeof(n_text), "%d", n);
    const char *argv[16] = {DDP_RUN_PATH, "-n", n_text, "--"};
    size_t k = 4;
    for (size_t i = 0; program[i] && k < 15; i++)
        argv[k++] = program[i];
    argv[k] = NULL;
    proc_start(p, argv, NULL);
    return proc_wait(p, WAIT_MS);
}

/* Every collective x dtype x op x count {0, 1, 7, 1000, 2^20 + 3} against the reference,
 * on one transport: shared memory (the default on one host) or ZeroMQ. The largest count
 * takes every chunking path; it runs where that is cheap. Eight ranks on two cores over
 * ZeroMQ take 300000 in its place (still the ring and chain algorithms, with a piece of
 * every rank's), and so do worlds 4 and 8 under the sanitizers, which look at code paths
 * rather than results; there ZeroMQ's world 3 takes 300000 too, and its world 8 70000. */
static const char *smaller_counts(int n, const char *transport) {
    bool zmq = !strcmp(transport, "zmq");
#ifdef DDP_SANITIZED
    if (zmq && n >= 4)
        return "0,1,7,1000,70000";
    if (n >= 4 || (zmq && n == 3))
        return "0,1,7,1000,300000";
#else
    if (zmq && n >= 4)
        return "0,1,7,1000,300000";
#endif
    return NULL;
}

static void every_collective(int n, const char *transport) {
    char env[32];
    snprintf(env, sizeof(env), "DDP_TRANSPORT=%s", transport);
    proc p;
    const char *program[] = {"/usr/bin/env", env, COLL_CHECK_PATH, NULL, NULL, NULL};
    const char *counts = smaller_counts(n, transport);
    if (counts) {
        program[3] = "--counts";
        program[4] = counts;
    }
    int code = run(&p, n, program);
    ck_assert_msg(code == 0, "world %d on %s exited %d:\n%s", n, transport, code, proc_output_tail(&p));
    for (int r = 0; r < n; r++) {
        char expected[64], line[256];
        snprintf(expected, sizeof(expected), "coll_check: rank %d uses %s", r, n == 1 ? "zmq" : transport);
        ck_assert_msg(proc_expect(&p, expected, 0, NULL, 0), "expected '%s' in:\n%s", expected, proc_output_tail(&p));
        p.cursor = 0;
        snprintf(expected, sizeof(expected), "coll_check: rank %d: ", r);
        ck_assert_msg(proc_expect(&p, expected, 0, line, sizeof(line)), "%s", proc_output_tail(&p));
        ck_assert_msg(strstr(line, " 0 failed"), "%s", line);
        p.cursor = 0;
    }
    ck_assert_msg(!strstr(proc_output(&p), "FAIL"), "%s", proc_output_tail(&p));
    proc_close(&p);
}

START_TEST(test_every_collective_shm) {
    static const int worlds[] = {1, 2, 3, 4, 8};
    every_collective(worlds[_i], "shm");
}
END_TEST

START_TEST(test_every_collective_zmq) {
    static const int worlds[] = {2, 3, 8};
    every_collective(worlds[_i], "zmq");
}
END_TEST

/* The rank's digest line of a coll_check run in p: "coll_check: digest of rank R: D". */
static void digest_of(proc *p, int r, char *line, size_t size) {
    char needle[64];
    snprintf(needle, sizeof(needle), "coll_check: digest of rank %d: ", r);
    p->cursor = 0;
    ck_assert_msg(proc_expect(p, needle, 0, line, size), "%s", proc_output_tail(p));
}

/* Buffers from ddp_alloc, 16 bytes into their regions: every collective right, over shared
 * memory (the peers reading the inputs in place) with the same bits as from malloc, and
 * over ZeroMQ (where it is private memory). */
START_TEST(test_alloc) {
    static const struct {
        const char *transport;
        int n;
    } runs[] = {{"shm", 3}, {"zmq", 2}};
    for (size_t k = 0; k < sizeof(runs) / sizeof(runs[0]); k++) {
        char env[32];
        snprintf(env, sizeof(env), "DDP_TRANSPORT=%s", runs[k].transport);
#ifdef DDP_SANITIZED
        const char *counts = k ? "0,1,7,1000,70000" : "0,1,7,1000,300000"; /* still two pieces */
#else
        const char *counts = k ? "0,1,7,1000,70000" : "0,1,7,1000,1048579";
#endif
        const char *with[] = {"/usr/bin/env", env, COLL_CHECK_PATH, "--counts", counts, "--alloc", "1", NULL};
        const char *without[] = {"/usr/bin/env", env, COLL_CHECK_PATH, "--counts", counts, NULL};
        proc a, b;
        int code = run(&a, runs[k].n, with);
        ck_assert_msg(code == 0, "--alloc over %s exited %d:\n%s", runs[k].transport, code, proc_output_tail(&a));
        ck_assert_msg(!strstr(proc_output(&a), "FAIL"), "%s", proc_output_tail(&a));
        code = run(&b, runs[k].n, without);
        ck_assert_msg(code == 0, "over %s exited %d:\n%s", runs[k].transport, code, proc_output_tail(&b));
        for (int r = 0; r < runs[k].n; r++) {
            char da[256], db[256];
            digest_of(&a, r, da, sizeof(da));
            digest_of(&b, r, db, sizeof(db));
            ck_assert_msg(!strcmp(da, db), "over %s, ddp_alloc's buffers gave other bits: %s / %s", runs[k].transport,
                          da, db);
        }
        proc_close(&a);
        proc_close(&b);
    }
}
END_TEST

/* The same inputs give the same bits on every run, and on every rank. */
START_TEST(test_same_bits_every_run) {
    char digests[2][3][64];
    for (int run_i = 0; run_i < 2; run_i++) {
        proc p;
        const char *program[] = {COLL_CHECK_PATH, "--counts", "1000,300000", "--dtypes", "f32,f16,bf16", NULL};
        int code = run(&p, 3, program);
        ck_assert_msg(code == 0, "exited %d: %s", code, proc_output_tail(&p));
        for (int r = 0; r < 3; r++) {
            char needle[64], line[256];
            snprintf(needle, sizeof(needle), "coll_check: digest of rank %d: ", r);
            p.cursor = 0;
            ck_assert_msg(proc_expect(&p, needle, 0, line, sizeof(line)), "%s", proc_output_tail(&p));
            snprintf(digests[run_i][r], sizeof(digests[run_i][r]), "%s", strstr(line, needle) + strlen(needle));
        }
        proc_close(&p);
    }
    for (int r = 0; r < 3; r++) {
        ck_assert_str_eq(digests[0][r], digests[0][0]);
        ck_assert_str_eq(digests[1][r], digests[0][r]);
    }
}
END_TEST

/* ddp-bench checks its own results and reports like nccl-tests. */
START_TEST(test_bench) {
    static const char *const collectives[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"};
    for (int i = 0; i < 5; i++) {
        const char *argv[] = {DDP_BENCH_PATH, collectives[i], "-n",      "3",       "-b", "4",        "-e", "4M",
                              "-f",           "32",           "--check", "--iters", "3",  "--warmup", "1",  NULL};
        proc p;
        proc_start(&p, argv, NULL);
        int code = proc_wait(&p, WAIT_MS);
        ck_assert_msg(code == 0, "%s exited %d: %s", collectives[i], code, proc_output_tail(&p));
        const char *out = proc_output(&p);
        ck_assert_msg(strstr(out, "# Avg bus bandwidth    : "), "%s", out);
        ck_assert_msg(strstr(out, "# Out of bounds values : 0 OK"), "%s", out);
        /* rows: 4, 128, 4096, 131072 and 4194304 bytes, none wrong; all_gather and
         * reduce_scatter say what they move: whole f32 counts for each of the 3 ranks */
        bool per_rank = i == 1 || i == 2;
        int rows = 0;
        for (const char *l = out; (l = strchr(l, '\n')); l++) {
            unsigned long long bytes;
            char wrong[16];
            if (sscanf(l + 1, "%llu %*u %*s %*s %*d %*f %*f %*f %15s", &bytes, wrong) == 2) {
                ck_assert_msg(!strcmp(wrong, "0"), "%s: %llu bytes: #wrong %s", collectives[i], bytes, wrong);
                ck_assert_msg(bytes % (per_rank ? 12 : 4) == 0, "%s: a row of %llu bytes", collectives[i], bytes);
                rows++;
            }
        }
        ck_assert_msg(rows >= 4, "%s: %d rows in: %s", collectives[i], rows, out);
        proc_close(&p);
    }
    /* a size no machine here can allocate: an error naming it, on every rank, not a crash */
    const char *huge[] = {DDP_BENCH_PATH, "all_reduce", "-n", "2", "-b", "1024G", "-e", "1024G", NULL};
    proc h;
    /* AddressSanitizer aborts on such a request unless told to fail it as malloc does */
    const char *asan[] = {"ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1", NULL};
    proc_start(&h, huge, asan);
    ck_assert_int_eq(proc_wait(&h, WAIT_MS), 1);
    ck_assert_msg(strstr(proc_output(&h), "two buffers of 1099511627784 bytes (-e 1024G)"), "%s", proc_output_tail(&h));
    ck_assert_msg(!strstr(proc_output(&h), "signal"), "%s", proc_output_tail(&h));
    proc_close(&h);
    const char *json[] = {DDP_BENCH_PATH, "all_reduce", "-n", "2", "-b", "1K", "-e", "64K", "--json", NULL};
    proc p;
    proc_start(&p, json, NULL);
    ck_assert_int_eq(proc_wait(&p, WAIT_MS), 0);
    ck_assert_msg(strstr(proc_output(&p), "\"busbw_gbps\"") && strstr(proc_output(&p), "\"avg_busbw_gbps\"") &&
                      strstr(proc_output(&p), "\"transport\": \"shm\""),
                  "%s", proc_output_tail(&p));
    proc_close(&p);
}
END_TEST

/* The shared memory segments pid maps (memfd:ddp-shm), by inode, added to inodes (*n of
 * them so far, each once). */
static void segment_inodes(pid_t pid, unsigned long *inodes, int *n, int max) {
    char path[64], line[512];
    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f, "%s: cannot read it", path);
    while (fgets(line, sizeof(line), f)) {
        unsigned long inode;
        if (!strstr(line, "/memfd:ddp-shm") || sscanf(line, "%*s %*s %*s %*s %lu", &inode) != 1)
            continue;
        bool seen = false;
        for (int i = 0; i < *n; i++)
            seen = seen || inodes[i] == inode;
        if (!seen && *n < max)
            inodes[(*n)++] = inode;
    }
    fclose(f);
}

/* Descriptors of pid that are segments: none, the mappings alone hold them. */
static int segment_fds(pid_t pid) {
    char path[64], target[256];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    ck_assert_msg(d, "%s: cannot read it", path);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        char link[320];
        snprintf(link, sizeof(link), "%s/%s", path, e->d_name);
        ssize_t len = readlink(link, target, sizeof(target) - 1);
        if (len > 0) {
            target[len] = '\0';
            n += strstr(target, "memfd:ddp-shm") != NULL;
        }
    }
    closedir(d);
    return n;
}

/* A process on this machine that still maps one of the segments, or 0. */
static pid_t segment_holder(const unsigned long *inodes, int n) {
    DIR *d = opendir("/proc");
    pid_t holder = 0;
    for (struct dirent *e; d && !holder && (e = readdir(d));) {
        pid_t pid = (pid_t)atoi(e->d_name);
        char path[64], line[512];
        snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
        FILE *f = pid > 0 ? fopen(path, "r") : NULL; /* gone already, or not ours to read: not holding ours */
        while (f && !holder && fgets(line, sizeof(line), f)) {
            unsigned long inode;
            if (strstr(line, "/memfd:ddp-shm") && sscanf(line, "%*s %*s %*s %*s %lu", &inode) == 1)
                for (int i = 0; i < n; i++)
                    holder = inode == inodes[i] ? pid : holder;
        }
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
    return holder;
}

/* A rank SIGKILLed while its peers wait on it in shared memory: each names it within 3 s,
 * and the host's segment dies with the job (it is unnamed: nothing in /dev/shm, no
 * descriptor kept, and once the ranks are gone no process maps it). */
START_TEST(test_peer_killed_mid_all_reduce) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    proc ranks[4];
    const char *argv[] = {COLL_FAULT_PATH, "stress", NULL};
    for (int r = 0; r < 4; r++)
        rank_start(&ranks[r], &d, 4, r, "stress", argv);
    for (int r = 0; r < 4; r++)
        ck_assert_msg(proc_expect(&ranks[r], "first ok", 60000, NULL, 0), "%s", proc_output_tail(&ranks[r]));
    unsigned long inodes[8];
    int n_inodes = 0;
    for (int r = 0; r < 4; r++) {
        segment_inodes(ranks[r].pid, inodes, &n_inodes, 8);
        ck_assert_int_eq(segment_fds(ranks[r].pid), 0);
    }
    ck_assert_msg(n_inodes == 1, "the ranks map %d segments, not the host's one", n_inodes);
    uint64_t killed_at = clock_now_ms();
    proc_signal(&ranks[2], SIGKILL);
    char expected[64];
    snprintf(expected, sizeof(expected), "rank 2 (pid %d on ", (int)ranks[2].pid);
    for (int r = 0; r < 4; r++) {
        if (r == 2)
            continue;
        char line[600];
        ck_assert_msg(proc_expect(&ranks[r], "failed:", 60000, line, sizeof(line)), "%s", proc_output_tail(&ranks[r]));
        uint64_t elapsed = clock_now_ms() - killed_at;
        ck_assert_msg(strstr(line, expected) && strstr(line, "died"), "rank %d: %s", r, line);
        ck_assert_msg(elapsed < 3000, "rank %d learnt of the death after %llu ms", r, (unsigned long long)elapsed);
    }
    for (int r = 0; r < 4; r++) /* after every rank's word: an exit (a sanitizer's) is no part of the 3 s */
        if (r != 2)
            ck_assert_int_eq(proc_wait(&ranks[r], 60000), 3);
    for (int r = 0; r < 4; r++)
        proc_close(&ranks[r]);
    ck_assert_int_eq(ddpd_stop(&d), 0);
    pid_t holder = segment_holder(inodes, n_inodes);
    ck_assert_msg(holder == 0, "pid %d still maps a segment of the job", (int)holder);
}
END_TEST

/* A rank SIGSTOPped while its peer waits on it (alive: ddpd's liveness, long here, does not
 * end it): ddpctl status shows the peer waiting on it, and the peer's wait times out
 * naming it. */
START_TEST(test_peer_stopped) {
    ddpd_proc d;
    const char *const slow_liveness[] = {"--liveness", "60", NULL};
    ddpd_start(&d, slow_liveness);
    proc ranks[2];
    const char *argv[] = {"/usr/bin/env", "DDP_TIMEOUT_MS=6000", COLL_FAULT_PATH, "stress", NULL};
    for (int r = 0; r < 2; r++)
        rank_start(&ranks[r], &d, 2, r, "stopped", argv);
    for (int r = 0; r < 2; r++)
        ck_assert_msg(proc_expect(&ranks[r], "first ok", 60000, NULL, 0), "%s", proc_output_tail(&ranks[r]));
    proc_signal(&ranks[1], SIGSTOP);
    const char *ctl[] = {DDPCTL_PATH, "--coordinator", d.endpoint, "status", NULL};
    bool reported = false;
    for (uint64_t until = clock_now_ms() + 6000; !reported && clock_now_ms() < until;) {
        proc c;
        proc_start(&c, ctl, NULL);
        ck_assert_int_eq(proc_wait(&c, WAIT_MS), 0);
        reported = strstr(proc_output(&c), "rank 0 has waited") && strstr(proc_output(&c), "for rank 1");
        proc_close(&c);
    }
    ck_assert_msg(reported, "ddpctl status never showed rank 0 waiting for rank 1");
    char line[600];
    ck_assert_msg(proc_expect(&ranks[0], "failed:", 60000, line, sizeof(line)), "%s", proc_output_tail(&ranks[0]));
    ck_assert_msg(strstr(line, "timed out after 6000 ms waiting for rank 1"), "%s", line);
    ck_assert_int_eq(proc_wait(&ranks[0], 60000), 3);
    proc_signal(&ranks[1], SIGKILL);
    for (int r = 0; r < 2; r++)
        proc_close(&ranks[r]);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

/* "Hosts" by DDP_HOST, one letter a rank. Ranks on one host share memory and talk to the
 * others over ZeroMQ (shm+zmq), with the bits of an all-ZeroMQ job (the digests agree),
 * on hosts of two ranks each and on interleaved ones (rank 1 alone, 0 and 2 together).
 * Asking for shm there is an error, on every rank, that says why. On one host, one rank
 * that asks for ZeroMQ takes the others with it (they agree, or they would wait on each
 * other forever). */
START_TEST(test_mixed_hosts) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    static const struct {
        const char *job, *hosts, *transport[4], *expected;
        int code;
        int same_bits_as; /* the run whose digests these must equal; -1: none */
    } runs[] = {
        {"two-hosts", "aabb", {"auto", "auto", "auto", "auto"}, "uses shm+zmq", 0, -1},
        {"two-hosts-zmq", "aabb", {"zmq", "auto", "auto", "auto"}, "uses zmq", 0, 0},
        {"interleaved", "aba", {"auto", "auto", "auto"}, "uses shm+zmq", 0, -1},
        {"interleaved-zmq", "aba", {"zmq", "zmq", "zmq"}, "uses zmq", 0, 2},
        {"two-hosts-shm",
         "aabb",
         {"shm", "shm", "shm", "shm"},
         "transport shm: the job's ranks are not all on this host",
         2,
         -1},
        {"one-asks-zmq", "aa", {"zmq", "auto"}, "uses zmq", 0, -1},
    };
    enum { RUNS = sizeof(runs) / sizeof(runs[0]) };
    char digests[RUNS][4][80];
    for (int k = 0; k < RUNS; k++) {
        int world = (int)strlen(runs[k].hosts);
        proc ranks[4];
        for (int r = 0; r < world; r++) {
            char host[32], transport[32];
            snprintf(host, sizeof(host), "DDP_HOST=host-%c", runs[k].hosts[r]);
            snprintf(transport, sizeof(transport), "DDP_TRANSPORT=%s", runs[k].transport[r]);
            /* between hosts, TCP (with CURVE, as the data plane always speaks it there) */
            const char *argv[] = {
                "/usr/bin/env",  host,       transport,          "DDP_DATA_ENDPOINT=tcp://127.0.0.1:*",
                COLL_CHECK_PATH, "--counts", "0,1,7,1000,70000", NULL};
            rank_start(&ranks[r], &d, world, r, runs[k].job, argv);
        }
        for (int r = 0; r < world; r++) {
            int code = proc_wait(&ranks[r], WAIT_MS);
            ck_assert_msg(code == runs[k].code, "%s: rank %d exited %d:\n%s", runs[k].job, r, code,
                          proc_output_tail(&ranks[r]));
            ck_assert_msg(strstr(proc_output(&ranks[r]), runs[k].expected), "%s: rank %d: expected '%s' in:\n%s",
                          runs[k].job, r, runs[k].expected, proc_output_tail(&ranks[r]));
            ck_assert_msg(runs[k].code || strstr(proc_output(&ranks[r]), " 0 failed"), "%s",
                          proc_output_tail(&ranks[r]));
            if (runs[k].code == 0)
                digest_of(&ranks[r], r, digests[k][r], sizeof(digests[k][r]));
            int other = runs[k].same_bits_as;
            if (other >= 0)
                ck_assert_msg(strcmp(digests[k][r], digests[other][r]) == 0, "%s: rank %d: '%s' where %s gave '%s'",
                              runs[k].job, r, digests[k][r], runs[other].job, digests[other][r]);
            proc_close(&ranks[r]);
        }
    }
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

/* coll_fault MODE on n ranks ends with exit 3, needle in its output. */
static void expect_failure(const char *mode, int n, const char *needle) {
    proc p;
    const char *program[] = {COLL_FAULT_PATH, mode, NULL};
    int code = run(&p, n, program);
    ck_assert_msg(code == 3, "%s exited %d: %s", mode, code, proc_output_tail(&p));
    ck_assert_msg(strstr(proc_output(&p), needle), "%s: expected '%s' in: %s", mode, needle, proc_output_tail(&p));
    proc_close(&p);
}

static void expect_mismatch(const char *mode, const char *needle) {
    proc p;
    const char *program[] = {COLL_FAULT_PATH, mode, NULL};
    int code = run(&p, 2, program);
    ck_assert_msg(code == 3, "exited %d: %s", code, proc_output_tail(&p));
    char line[600];
    ck_assert_msg(proc_expect(&p, "failed: -22 ", 0, line, sizeof(line)), "%s", proc_output_tail(&p));
    ck_assert_msg(strstr(line, needle), "expected '%s' in: %s", needle, line);
    proc_close(&p);
}

/* A member that posts its input where it shared nothing is refused by name, never read:
 * rank 1 forges rank 0's call in its own header (tests/integration/coll_fault.c). */
START_TEST(test_forged_inputs) {
    expect_failure("bad-offset", 2,
                   "rank 1 posted its input at bytes 4096..4198400 of region 0, which is 4194304 bytes: outside what "
                   "it shared, refused");
    expect_failure("bad-region", 2, "rank 1 posted its input in region 7, which it never shared: refused");
    expect_failure("bad-root", 2,
                   "broadcast #1: rank 1 posted its input at bytes 4096..4198400 of region 0, which is 4194304 bytes: "
                   "outside what it shared, refused");
    /* ranks that ask ddp_alloc for other sizes: an error, not a hang, on every rank at once.
     * Started without ddp-run, which would stop rank 0 once another rank exits. */
    ddpd_proc d;
    ddpd_start(&d, NULL);
    proc ranks[3];
    const char *mismatch[] = {COLL_FAULT_PATH, "alloc-mismatch", NULL};
    for (int r = 0; r < 3; r++)
        rank_start(&ranks[r], &d, 3, r, "alloc-mismatch", mismatch);
    int codes[3];
    for (int r = 0; r < 3; r++) /* all of them first: a failed check leaves none behind */
        codes[r] = proc_wait(&ranks[r], WAIT_MS);
    ck_assert_int_eq(ddpd_stop(&d), 0);
    for (int r = 0; r < 3; r++) {
        const char *expected = r == 0 ? "failed: ddp_alloc: another rank could not take its part"
                                      : "failed: ddp_alloc: rank 0 asked for 4096 bytes of shared memory where this "
                                        "rank asked for";
        bool ok = codes[r] == 3 && strstr(proc_output(&ranks[r]), expected);
        char tail[2048];
        snprintf(tail, sizeof(tail), "%s", proc_output_tail(&ranks[r]));
        for (int k = r; !ok && k < 3; k++)
            proc_close(&ranks[k]);
        ck_assert_msg(ok, "rank %d exited %d, expected '%s' in: %s", r, codes[r], expected, tail);
        proc_close(&ranks[r]);
    }
    /* a process that is no rank asks for the region while rank 0 hands it over: turned
     * away, and the ranks go on (its socket's name is no secret) */
    proc p;
    const char *program[] = {COLL_FAULT_PATH, "alloc-stranger", NULL};
    int code = run(&p, 2, program);
    ck_assert_msg(code == 0, "alloc-stranger exited %d: %s", code, proc_output_tail(&p));
    char line[128];
    int refused = 0, served = -1;
    ck_assert_msg(proc_expect(&p, "stranger: ", 0, line, sizeof(line)) &&
                      sscanf(strstr(line, "stranger: "), "stranger: refused %d, served %d", &refused, &served) == 2,
                  "%s", proc_output_tail(&p));
    ck_assert_msg(refused >= 1 && served == 0, "%s", line);
    ck_assert_msg(strstr(proc_output(&p), "[rank 0] alloc ok") && strstr(proc_output(&p), "[rank 1] alloc ok"), "%s",
                  proc_output_tail(&p));
    proc_close(&p);
}
END_TEST

/* A rank that comes to a call another rank has given up on (it timed out, and went on)
 * fails, naming that rank: it does not complete the call with the input the other left
 * posted, which that rank may since have overwritten. */
START_TEST(test_too_late) {
    char dir[] = "/tmp/check_collectives.XXXXXX", dir_env[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(dir_env, sizeof(dir_env), "DDP_FAULT_DIR=%s", dir);
    const char *program[] = {"/usr/bin/env", "DDP_TIMEOUT_MS=1000", dir_env, COLL_FAULT_PATH, "too-late", NULL};
    proc p;
    int code = run(&p, 2, program);
    ck_assert_msg(code == 3, "exited %d: %s", code, proc_output_tail(&p));
    ck_assert_msg(strstr(proc_output(&p), "[rank 0] failed: -110 ") &&
                      strstr(proc_output(&p), "all_reduce #1 timed out after 1000 ms waiting for rank 1"),
                  "%s", proc_output_tail(&p));
    ck_assert_msg(strstr(proc_output(&p), "[rank 1] failed: -110 (") &&
                      strstr(proc_output(&p), "all_reduce #1: rank 0 gave up on it (it failed there"),
                  "%s", proc_output_tail(&p));
    ck_assert_msg(!strstr(proc_output(&p), "all-reduce done"), "%s", proc_output_tail(&p));
    char path[96];
    snprintf(path, sizeof(path), "%s/gave-up", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/answered", dir);
    unlink(path);
    rmdir(dir);
    proc_close(&p);
}
END_TEST

/* Rank 0 gives up on an all-reduce rank 2 never comes to, and goes on; rank 1, waiting for
 * rank 2 with a longer timeout, learns it at once (no job's end follows: nobody aborts). */
START_TEST(test_peer_gave_up_while_waiting) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    proc ranks[3];
    for (int r = 0; r < 3; r++) {
        const char *argv[] = {"/usr/bin/env", r == 0 ? "DDP_TIMEOUT_MS=1000" : "DDP_TIMEOUT_MS=60000", COLL_FAULT_PATH,
                              "one-absent", NULL};
        rank_start(&ranks[r], &d, 3, r, "absent", argv);
    }
    char line[600];
    bool zero = proc_expect(&ranks[0], "failed: ", WAIT_MS, line, sizeof(line));
    bool zero_timed_out = zero && strstr(line, "timed out after 1000 ms waiting for rank 2");
    uint64_t t0 = clock_now_ms();
    int code = proc_wait(&ranks[1], WAIT_MS);
    uint64_t waited = clock_now_ms() - t0;
    bool named = strstr(proc_output(&ranks[1]), "all_reduce #1: rank 0 gave up on it (it failed there");
    char tail[1024];
    snprintf(tail, sizeof(tail), "%s", proc_output_tail(&ranks[1]));
    for (int r = 0; r < 3; r++)
        proc_close(&ranks[r]);
    ck_assert_int_eq(ddpd_stop(&d), 0);
    ck_assert_msg(zero_timed_out, "rank 0: %s", line);
    /* not its own 60 s: the second's grace for a job's end that does not come, and a sleep slice */
    ck_assert_msg(code == 3 && named && waited < 30000, "rank 1 exited %d after %llu ms: %s", code,
                  (unsigned long long)waited, tail);
}
END_TEST

/* A job of one rank moves nothing, but its end ends its calls as any job's: an operator's
 * abort stops a loop of all-reduces. */
START_TEST(test_world_one_ended) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    proc rank;
    const char *argv[] = {COLL_FAULT_PATH, "stress", NULL};
    rank_start(&rank, &d, 1, 0, "solo", argv);
    ck_assert_msg(proc_expect(&rank, "first ok", WAIT_MS, NULL, 0), "%s", proc_output_tail(&rank));
    const char *ctl[] = {DDPCTL_PATH, "--coordinator", d.endpoint, "abort", "solo", NULL};
    proc c;
    proc_start(&c, ctl, NULL);
    ck_assert_msg(proc_wait(&c, WAIT_MS) == 0, "%s", proc_output_tail(&c));
    proc_close(&c);
    ck_assert_int_eq(proc_wait(&rank, WAIT_MS), 3);
    ck_assert_msg(strstr(proc_output(&rank), "failed: -103 ") && strstr(proc_output(&rank), "aborted by an operator"),
                  "%s", proc_output_tail(&rank));
    proc_close(&rank);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

START_TEST(test_mismatched_counts) {
    expect_mismatch("mismatch-count", "called all_reduce(count 100");
}
END_TEST

START_TEST(test_mismatched_collectives) {
    expect_mismatch("mismatch-kind", "called broadcast(count 1000, f32");
    /* each waits for the other as its root: both see the other's call, neither waits it out */
    expect_mismatch("mismatch-root", "where this rank called broadcast(count 1000, f32, sum, root ");
    /* the barrier goes through shared memory too, numbered with the collectives */
    expect_mismatch("mismatch-barrier", "called all_reduce(count 1000, f32");
}
END_TEST

/* The data planes a fault is tried on: shared memory, ZeroMQ, and "hosts" by DDP_HOST, one
 * letter a rank ("hosts aab": ranks 0 and 1 share one, their frames go through the
 * mailboxes). Starts coll_fault MODE as each rank of job on plane; returns the world. */
static int start_on_plane(proc *ranks, const ddpd_proc *d, const char *plane, int world, const char *job,
                          const char *mode) {
    const char *hosts = strncmp(plane, "hosts ", 6) ? NULL : plane + 6;
    if (hosts)
        world = (int)strlen(hosts);
    for (int r = 0; r < world; r++) {
        char host[32], transport[32];
        snprintf(host, sizeof(host), "DDP_HOST=host-%c", hosts ? hosts[r] : 'a');
        snprintf(transport, sizeof(transport), "DDP_TRANSPORT=%s", hosts ? "auto" : plane);
        /* between hosts, TCP (with CURVE, as the data plane always speaks it there) */
        const char *argv[] = {"/usr/bin/env",  host, transport, "DDP_DATA_ENDPOINT=tcp://127.0.0.1:*",
                              COLL_FAULT_PATH, mode, NULL};
        rank_start(&ranks[r], d, world, r, job, argv);
    }
    return world;
}

/* Ranks that wait for no one in a call (each the root of its own broadcast; a scatter's
 * root met by a gather's givers) learn of it at their next call, on every data plane:
 * shared memory, ZeroMQ, and a job over two "hosts" (ranks 0 and 1 share one, their frames
 * go through the mailboxes). Over shared memory every rank names it; over sockets a rank
 * may learn instead that a peer that named it has gone (its frames with it): every rank
 * fails, none waits out its timeout. */
START_TEST(test_mismatch_found_next_call) {
    static const struct {
        const char *mode, *needles[2]; /* each rank's error names one of them */
    } modes[] = {
        {"mismatch-roots", {"called broadcast(count 1000, f32, sum, root ", NULL}},
        {"mismatch-rooted",
         {"called gather(count 1000, f32, sum, root 0)", "called scatter(count 1000, f32, sum, root 0)"}},
    };
    static const char *planes[] = {"shm", "zmq", "hosts aab"}; /* aab: DDP_HOST by rank */
    ddpd_proc d;
    ddpd_start(&d, NULL);
    for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++)
        for (size_t k = 0; k < sizeof(planes) / sizeof(planes[0]); k++) {
            int naming = 0; /* ranks whose error names the mismatch */
            char job[64];
            snprintf(job, sizeof(job), "%s-%zu", modes[m].mode, k);
            proc ranks[3];
            int world = start_on_plane(ranks, &d, planes[k], 2, job, modes[m].mode);
            for (int r = 0; r < world; r++) {
                int code = proc_wait(&ranks[r], WAIT_MS);
                char line[600] = "";
                ck_assert_msg(code == 3 && proc_expect(&ranks[r], "failed: ", 0, line, sizeof(line)),
                              "%s on %s: rank %d exited %d: %s", modes[m].mode, planes[k], r, code,
                              proc_output_tail(&ranks[r]));
                bool named =
                    strstr(line, "failed: -22 ") && strstr(line, "collective #1: rank ") &&
                    (strstr(line, modes[m].needles[0]) || (modes[m].needles[1] && strstr(line, modes[m].needles[1])));
                ck_assert_msg(named || (strcmp(planes[k], "shm") && strstr(line, "failed: -103 ")),
                              "%s on %s: rank %d: %s", modes[m].mode, planes[k], r, line);
                naming += named;
                proc_close(&ranks[r]);
            }
            ck_assert_msg(naming > 0, "%s on %s: no rank named the mismatch", modes[m].mode, planes[k]);
        }
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

/* A recv of another count than its message's is refused, an empty message too (over
 * sockets an empty send once sent nothing, and the next message met the recv of none),
 * on every data plane; and over ZeroMQ a message dropped because more than the queue's
 * 1 GiB came before its recv fails the recv that waits, not one later that would take
 * the next message in its place. */
START_TEST(test_p2p_faults) {
    static const struct {
        const char *mode, *needle;
    } modes[] = {
        {"p2p-count", "rank 0 sent 5 elements of i32 with tag 1; this rank expected 4 elements of i32"},
        {"p2p-empty", "rank 0 sent 5 elements of i32 with tag 1; this rank expected 0 elements of i32"},
    };
    static const char *planes[] = {"shm", "zmq", "hosts ab"};
    ddpd_proc d;
    ddpd_start(&d, NULL);
    for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++)
        for (size_t k = 0; k < sizeof(planes) / sizeof(planes[0]); k++) {
            char job[64];
            snprintf(job, sizeof(job), "%s-%zu", modes[m].mode, k);
            proc ranks[2];
            start_on_plane(ranks, &d, planes[k], 2, job, modes[m].mode);
            int code = proc_wait(&ranks[1], WAIT_MS);
            char line[600] = "";
            ck_assert_msg(code == 3 && proc_expect(&ranks[1], "failed: -22 ", 0, line, sizeof(line)) &&
                              strstr(line, modes[m].needle),
                          "%s on %s: rank 1 exited %d: %s", modes[m].mode, planes[k], code,
                          proc_output_tail(&ranks[1]));
            proc_wait(&ranks[0], WAIT_MS); /* it sent: its code is its own */
            for (int r = 0; r < 2; r++)
                proc_close(&ranks[r]);
        }
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

START_TEST(test_p2p_flood) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    proc ranks[2];
    const char *argv[] = {"/usr/bin/env", "DDP_TRANSPORT=zmq", COLL_FAULT_PATH, "p2p-flood", NULL};
    for (int r = 0; r < 2; r++)
        rank_start(&ranks[r], &d, 2, r, "flood", argv);
    int code = proc_wait(&ranks[1], WAIT_MS);
    char line[600] = "";
    ck_assert_msg(code == 3 && proc_expect(&ranks[1], "failed: -105 ", 0, line, sizeof(line)) &&
                      strstr(line, "a frame from rank 0 was dropped (more early data than the matching queue holds)"),
                  "rank 1 exited %d: %s", code, proc_output_tail(&ranks[1]));
    proc_wait(&ranks[0], WAIT_MS);
    for (int r = 0; r < 2; r++)
        proc_close(&ranks[r]);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

/* The seed tutorials, each with the result it must print. */
static const struct {
    const char *program;
    int n;
    const char *expected;
    int times; /* lines expected */
} tutorials[] = {
    {EXAMPLES_DIR "/example-p2p", 2, "Rank 1 has data 1", 1},
    {EXAMPLES_DIR "/example-send-back", 3, "Rank 0 sum: [3, 5, 7]", 1},
    {EXAMPLES_DIR "/example-gather", 4, "Rank 0 gathered [0, 1, 2, 3]", 1},
    {EXAMPLES_DIR "/example-reduce", 4, "Rank 0 has [4, 4, 4]", 1},
    {EXAMPLES_DIR "/example-all-reduce", 4, "has [12, 16]", 4},
    {EXAMPLES_DIR "/example-average-gradients", 4, "averaged gradient matches the full batch", 4},
};

START_TEST(test_examples) {
    proc p;
    const char *program[] = {tutorials[_i].program, NULL};
    int code = run(&p, tutorials[_i].n, program);
    ck_assert_msg(code == 0, "%s exited %d: %s", tutorials[_i].program, code, proc_output_tail(&p));
    for (int k = 0; k < tutorials[_i].times; k++)
        ck_assert_msg(proc_expect(&p, tutorials[_i].expected, 0, NULL, 0), "expected '%s' %d times in: %s",
                      tutorials[_i].expected, tutorials[_i].times, proc_output_tail(&p));
    proc_close(&p);
}
END_TEST

static TCase *add_case(Suite *s, TCase *tc) {
    tcase_set_timeout(tc, CASE_TIMEOUT_S);
    suite_add_tcase(s, tc);
    return tc;
}

int main(int argc, char **argv) {
    Suite *s = suite_create("collectives");
    /* Cases CTest runs side by side: the matrix one world at a time, then the rest. */
    tcase_add_loop_test(add_case(s, tcase_create("world1")), test_every_collective_shm, 0, 1);
    tcase_add_loop_test(add_case(s, tcase_create("world2")), test_every_collective_shm, 1, 2);
    tcase_add_loop_test(add_case(s, tcase_create("world3")), test_every_collective_shm, 2, 3);
    tcase_add_loop_test(add_case(s, tcase_create("world4")), test_every_collective_shm, 3, 4);
    tcase_add_loop_test(add_case(s, tcase_create("world8")), test_every_collective_shm, 4, 5);
    tcase_add_loop_test(add_case(s, tcase_create("zmq-world2")), test_every_collective_zmq, 0, 1);
    tcase_add_loop_test(add_case(s, tcase_create("zmq-world3")), test_every_collective_zmq, 1, 2);
    tcase_add_loop_test(add_case(s, tcase_create("zmq-world8")), test_every_collective_zmq, 2, 3);
    tcase_add_test(add_case(s, tcase_create("same-bits")), test_same_bits_every_run);
    tcase_add_test(add_case(s, tcase_create("bench")), test_bench);
    tcase_add_test(add_case(s, tcase_create("mixed-hosts")), test_mixed_hosts);
    tcase_add_test(add_case(s, tcase_create("alloc")), test_alloc);
    TCase *faults = add_case(s, tcase_create("faults"));
    tcase_add_test(faults, test_peer_killed_mid_all_reduce);
    tcase_add_test(faults, test_peer_stopped);
    tcase_add_test(faults, test_forged_inputs);
    tcase_add_test(faults, test_too_late);
    tcase_add_test(faults, test_world_one_ended);
    tcase_add_test(faults, test_peer_gave_up_while_waiting);
    tcase_add_test(faults, test_mismatched_counts);
    tcase_add_test(faults, test_mismatched_collectives);
    tcase_add_test(faults, test_mismatch_found_next_call);
    tcase_add_test(faults, test_p2p_faults);
    tcase_add_test(faults, test_p2p_flood);
    tcase_add_loop_test(add_case(s, tcase_create("examples")), test_examples, 0,
                        (int)(sizeof(tutorials) / sizeof(tutorials[0])));
    return check_main(s, argc, argv);
}
