/* ddp-worker with odd but plausible inputs, as a user's probe found them: paths that are
 * not regular files, an existing checkpoint, signals at every stage, exit codes, metrics
 * across a resume, on a full disk and into a FIFO, a resume with other settings, other data
 * or nothing left to do.
 * Each would have caught a bug it fixed. The device-node cases need root (a case of their
 * own, skipped elsewhere). */
#include <cJSON.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/clock.h"
#include "tests/check_main.h"
#include "tests/integration/harness.h"
#include "worker/trainer/checkpoint.h"

#define WAIT_MS 60000     /* one launch, at most */
#define CASE_TIMEOUT_S 90 /* a case, at most; under CTest's 120 s (tests/CMakeLists.txt) */
#define MODEL "64-16-10"
#define N_PARAMS (64 * 16 + 16 + 16 * 10 + 10)

static char dir[64];

static void setup(void) {
    snprintf(dir, sizeof(dir), "/tmp/check_worker_%d", (int)getpid());
    mkdir(dir, 0755);
    idx_write_split(dir, "train", 256, 8, 1);
    idx_write_split(dir, "t10k", 64, 8, 2);
}

static void teardown(void) {
    char cmd[200];
    snprintf(cmd, sizeof(cmd), "umount %s/small 2>/dev/null; rm -rf %s", dir, dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* Starts ddp-run -n n -- ddp-worker --data DIR --model 64-16-10 --batch-size 32 ARGS... */
static void train_start(proc *p, int n, const char *const *args, const char *const *env) {
    char n_text[8];
    snprintf(n_text, sizeof(n_text), "%d", n);
    const char *argv[48] = {DDP_RUN_PATH, "-n",  n_text,         "--", DDP_WORKER_PATH, "--data", dir,
                            "--model",    MODEL, "--batch-size", "32"};
    size_t k = 11;
    for (size_t i = 0; args && args[i] && k < 47; i++)
        argv[k++] = args[i];
    argv[k] = NULL;
    proc_start(p, argv, env);
}

/* The same, to its end; the exit code. */
static int train_env(proc *p, int n, const char *const *args, const char *const *env) {
    train_start(p, n, args, env);
    return proc_wait(p, WAIT_MS);
}

static int train(proc *p, int n, const char *const *args) {
    return train_env(p, n, args, NULL);
}

static void path_in_dir(char *buf, size_t size, const char *name) {
    snprintf(buf, size, "%s/%s", dir, name);
}

static void assert_output(proc *p, const char *needle) {
    ck_assert_msg(strstr(proc_output(p), needle), "expected '%s' in:\n%s", needle, proc_output_tail(p));
}

static checkpoint_info read_info(const char *path) {
    checkpoint_info expect = {.model = MODEL, .n_params = N_PARAMS}, info;
    float *params = malloc(N_PARAMS * sizeof(float));
    char err[512];
    ck_assert_msg(checkpoint_read(path, &expect, &info, params, NULL, err, sizeof(err)) == 0, "%s", err);
    free(params);
    return info;
}

static char *read_bytes(const char *path, size_t *ret_size) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f, "%s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    *ret_size = (size_t)ftell(f);
    rewind(f);
    char *data = malloc(*ret_size + 1);
    ck_assert_uint_eq(fread(data, 1, *ret_size, f), *ret_size);
    fclose(f);
    return data;
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f, "%s: %s", path, strerror(errno));
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return strdup(buf);
}

/* A FIFO at --checkpoint is refused at start-up (a usage error), named with the flag, and
 * stays a FIFO; so is a FIFO among the data files, at once rather than blocking. */
START_TEST(test_not_regular_files) {
    char fifo[128];
    path_in_dir(fifo, sizeof(fifo), "fifo");
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    const char *args[] = {"--checkpoint", fifo, "--steps", "2", NULL};
    proc p;
    ck_assert_int_eq(train(&p, 1, args), 2);
    assert_output(&p, "--checkpoint ");
    assert_output(&p, "a FIFO, not a regular file");
    ck_assert_msg(!strstr(proc_output(&p), "epoch"), "%s", proc_output_tail(&p));
    proc_close(&p);
    struct stat st;
    ck_assert_int_eq(lstat(fifo, &st), 0);
    ck_assert(S_ISFIFO(st.st_mode));

    char data[128], file[192];
    path_in_dir(data, sizeof(data), "fifo-data");
    mkdir(data, 0755);
    idx_write_split(data, "train", 64, 8, 3);
    snprintf(file, sizeof(file), "%s/t10k-images-idx3-ubyte.gz", data);
    ck_assert_int_eq(mkfifo(file, 0600), 0);
    snprintf(file, sizeof(file), "%s/t10k-labels-idx1-ubyte.gz", data);
    ck_assert_int_eq(mkfifo(file, 0600), 0);
    const char *fifo_data[] = {"--data", data, "--steps", "1", NULL};
    ck_assert_int_ne(train(&p, 1, fifo_data), 0);
    assert_output(&p, "t10k-labels-idx1-ubyte.gz: not a regular file"); /* a split's labels are read first */
    proc_close(&p);
}
END_TEST

/* A symlink at --checkpoint is written through: it stays a link, its target gets the
 * checkpoint, readable by its owner only. */
START_TEST(test_symlink_written_through) {
    char real[128], link[128];
    path_in_dir(real, sizeof(real), "real.ckpt");
    path_in_dir(link, sizeof(link), "link.ckpt");
    ck_assert_int_eq(symlink(real, link), 0);
    const char *args[] = {"--checkpoint", link, "--steps", "3", NULL};
    proc p;
    ck_assert_msg(train(&p, 1, args) == 0, "%s", proc_output_tail(&p));
    proc_close(&p);
    struct stat st;
    ck_assert_int_eq(lstat(link, &st), 0);
    ck_assert(S_ISLNK(st.st_mode));
    ck_assert_int_eq(stat(real, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0600);
    ck_assert_uint_eq(read_info(real).step, 3);
    /* a link to a file in a directory that does not exist: refused, naming the flag */
    char dangling[128];
    path_in_dir(dangling, sizeof(dangling), "dangling.ckpt");
    ck_assert_int_eq(symlink("/nonexistent-dir/x.ckpt", dangling), 0);
    const char *bad[] = {"--checkpoint", dangling, "--steps", "1", NULL};
    ck_assert_int_eq(train(&p, 1, bad), 2);
    assert_output(&p, "the directory /nonexistent-dir does not exist");
    proc_close(&p);
}
END_TEST

/* A checkpoint directory that does not exist is found at start-up, not after an epoch,
 * and the message names the flag, not an internal temporary file. */
START_TEST(test_bad_checkpoint_directory) {
    const char *args[] = {"--checkpoint", "/nonexistent-dir/x.ckpt", "--epochs", "1", NULL};
    proc p;
    ck_assert_int_eq(train(&p, 1, args), 2);
    assert_output(&p, "--checkpoint /nonexistent-dir/x.ckpt: the directory /nonexistent-dir does not exist");
    ck_assert_msg(!strstr(proc_output(&p), "epoch 1:") && !strstr(proc_output(&p), ".tmp"), "%s", proc_output_tail(&p));
    proc_close(&p);
}
END_TEST

/* A fresh run does not overwrite a checkpoint: it refuses, saying how to resume or start
 * over; --overwrite starts over. */
START_TEST(test_existing_checkpoint) {
    char ckpt[128];
    path_in_dir(ckpt, sizeof(ckpt), "kept.ckpt");
    const char *first[] = {"--checkpoint", ckpt, "--steps", "5", NULL};
    proc p;
    ck_assert_int_eq(train(&p, 1, first), 0);
    proc_close(&p);
    size_t n_before, n_after;
    char *before = read_bytes(ckpt, &n_before);
    const char *again[] = {"--checkpoint", ckpt, "--steps", "2", NULL};
    ck_assert_int_eq(train(&p, 1, again), 2);
    assert_output(&p, "exists: add --resume to continue from it, or --overwrite to start over");
    proc_close(&p);
    ck_assert_uint_eq(read_info(ckpt).step, 5);
    char *after = read_bytes(ckpt, &n_after);
    ck_assert(n_before == n_after && memcmp(before, after, n_before) == 0);
    free(before);
    free(after);
    const char *over[] = {"--checkpoint", ckpt, "--steps", "2", "--overwrite", NULL};
    ck_assert_int_eq(train(&p, 2, over), 0);
    proc_close(&p);
    ck_assert_uint_eq(read_info(ckpt).step, 2);
    const char *both[] = {"--checkpoint", ckpt, "--resume", "--overwrite", NULL};
    ck_assert_int_eq(train(&p, 1, both), 2);
    assert_output(&p, "choose one");
    proc_close(&p);
}
END_TEST

/* Two ranks of job that train for good, saving to ckpt, started once rank 0 has ended an
 * epoch. */
static void train_two_for_good(ddpd_proc *d, proc w[2], const char *ckpt, const char *job) {
    ddpd_start(d, NULL);
    const char *argv[] = {DDP_WORKER_PATH, "--data",       dir,  "--model", MODEL, "--batch-size", "32", "--epochs",
                          "100000",        "--checkpoint", ckpt, NULL};
    for (int r = 0; r < 2; r++)
        rank_start(&w[r], d, 2, r, job, argv);
    ck_assert_msg(proc_expect(&w[0], "epoch 2:", WAIT_MS, NULL, 0), "%s", proc_output_tail(&w[0]));
}

/* Both ranks stopped by sig (exit 128+sig), the checkpoint of the step rank 0 names
 * written; then closed, with ddpd. */
static void expect_stopped_with_checkpoint(ddpd_proc *d, proc w[2], int sig, const char *ckpt) {
    for (int r = 0; r < 2; r++)
        ck_assert_msg(proc_wait(&w[r], WAIT_MS) == 128 + sig, "%s", proc_output_tail(&w[r]));
    char line[256];
    ck_assert_msg(proc_expect(&w[0], "stopped by a signal at step", 0, line, sizeof(line)), "%s",
                  proc_output_tail(&w[0]));
    unsigned long long step = strtoull(strstr(line, "at step ") + 8, NULL, 10);
    ck_assert_uint_eq(read_info(ckpt).step, step);
    for (int r = 0; r < 2; r++)
        proc_close(&w[r]);
    ck_assert_int_eq(ddpd_stop(d), 0);
}

/* SIGHUP (a closed terminal) stops the ranks like SIGTERM: checkpoint written, each rank
 * exits 128+1 and says where it stopped. */
START_TEST(test_sighup_keeps_the_checkpoint) {
    char ckpt[128];
    path_in_dir(ckpt, sizeof(ckpt), "hup.ckpt");
    ddpd_proc d;
    proc w[2];
    train_two_for_good(&d, w, ckpt, "hup");
    proc_signal(&w[1], SIGHUP); /* one rank's terminal: every rank stops with it */
    expect_stopped_with_checkpoint(&d, w, SIGHUP, ckpt);
}
END_TEST

/* The same SIGTERM twice within a moment, as systemd's KillMode=control-group (every
 * process of the unit) and ddp-run's forwarding together send it, to a rank waiting in a
 * collective (its peer stopped meanwhile): one stop, the checkpoint written (the second
 * one interrupted libddp's wait, and no checkpoint came). */
START_TEST(test_sigterm_twice_keeps_the_checkpoint) {
    char ckpt[128];
    path_in_dir(ckpt, sizeof(ckpt), "twice.ckpt");
    ddpd_proc d;
    proc w[2];
    train_two_for_good(&d, w, ckpt, "twice");
    proc_signal(&w[1], SIGSTOP); /* rank 0 then waits in a collective, where an interrupt would end it */
    usleep(200 * 1000);
    proc_signal(&w[0], SIGTERM);
    usleep(100 * 1000); /* the first handled, not merged with the second */
    proc_signal(&w[0], SIGTERM);
    usleep(100 * 1000);
    proc_signal(&w[1], SIGCONT);
    expect_stopped_with_checkpoint(&d, w, SIGTERM, ckpt);
}
END_TEST

/* Ctrl-C while the job forms ends the worker at once (it used to wait out the 300 s join
 * timeout), exit 128+2, and ddpd hears that it left. Under ddp-run, a SIGTERM at
 * rendezvous ends the ranks without the grace period's SIGKILL. */
START_TEST(test_interrupted_while_forming) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    const char *argv[] = {DDP_WORKER_PATH, "--data", dir, "--model", MODEL, NULL};
    proc w;
    rank_start(&w, &d, 2, -1, "never", argv);
    ck_assert(proc_expect(&d.p, "joined (1/2)", WAIT_MS, NULL, 0));
    uint64_t t0 = clock_now_ms();
    proc_signal(&w, SIGINT);
    ck_assert_int_eq(proc_wait(&w, WAIT_MS), 128 + SIGINT);
    ck_assert_msg(clock_now_ms() - t0 < 5000, "took %llu ms", (unsigned long long)(clock_now_ms() - t0));
    ck_assert_msg(proc_expect(&d.p, "left while forming", WAIT_MS, NULL, 0), "%s", proc_output_tail(&d.p));
    proc_close(&w);
    ck_assert_int_eq(ddpd_stop(&d), 0);

    /* ddp-run -n 2 of a job of 3: it never forms */
    const char *launch[] = {DDP_RUN_PATH, "-n", "2",       "--verbose", "--grace-ms",   "20000", "--", DDP_WORKER_PATH,
                            "--data",     dir,  "--model", MODEL,       "--world-size", "3",     NULL};
    proc p;
    proc_start(&p, launch, NULL);
    ck_assert_msg(proc_expect(&p, "joined (2/3)", WAIT_MS, NULL, 0), "%s", proc_output_tail(&p));
    t0 = clock_now_ms();
    proc_signal(&p, SIGTERM);
    ck_assert_int_eq(proc_wait(&p, WAIT_MS), 128 + SIGTERM);
    ck_assert_msg(clock_now_ms() - t0 < 10000, "took %llu ms", (unsigned long long)(clock_now_ms() - t0));
    ck_assert_msg(!strstr(proc_output(&p), "SIGKILL"), "%s", proc_output_tail(&p));
    proc_close(&p);
}
END_TEST

/* ddpd restarts under a training job: the workers train on and rejoin it. Then it goes for
 * good: once their wait (DDP_COORDINATOR_WAIT_MS) runs out, they stop together at a step
 * with the checkpoint written, exit 75, and a run resumes from it once ddpd is back. */
START_TEST(test_coordinator_restart_and_loss) {
    char ckpt[128], listen[128], state[128], line[256];
    path_in_dir(ckpt, sizeof(ckpt), "lab.ckpt");
    snprintf(listen, sizeof(listen), "ipc://%s/ddpd.sock", dir);
    path_in_dir(state, sizeof(state), "state");
    ck_assert_int_eq(mkdir(state, 0700), 0);
    const char *flags[] = {"--listen", listen, "--state-dir", state, NULL};
    ddpd_proc d;
    ddpd_start(&d, flags);
    const char *argv[] = {"/usr/bin/env",
                          "DDP_COORDINATOR_WAIT_MS=6000", /* room for a sanitized ddpd to start */
                          DDP_WORKER_PATH,
                          "--data",
                          dir,
                          "--model",
                          MODEL,
                          "--batch-size",
                          "32",
                          "--epochs",
                          "100000",
                          "--checkpoint",
                          ckpt,
                          NULL};
    proc w[2];
    for (int r = 0; r < 2; r++)
        rank_start(&w[r], &d, 2, r, "lab", argv);
    ck_assert_msg(proc_expect(&w[0], "epoch 2:", WAIT_MS, NULL, 0), "%s", proc_output_tail(&w[0]));
    ck_assert_int_eq(ddpd_stop(&d), 0);
    ck_assert_msg(proc_expect(&w[0], "epoch ", WAIT_MS, NULL, 0), "%s", proc_output_tail(&w[0])); /* it trains on */
    ddpd_start(&d, flags);
    for (int r = 0; r < 2; r++)
        ck_assert_msg(proc_expect(&w[r], "rejoined ddpd at", WAIT_MS, NULL, 0), "%s", proc_output_tail(&w[r]));
    ck_assert_msg(proc_expect(&d.p, "job 'lab' (generation 1) recovered", WAIT_MS, NULL, 0), "%s",
                  proc_output_tail(&d.p));

    ck_assert_int_eq(ddpd_stop(&d), 0); /* for good */
    for (int r = 0; r < 2; r++)
        ck_assert_msg(proc_wait(&w[r], WAIT_MS) == 75, "rank %d: %s", r, proc_output_tail(&w[r]));
    ck_assert_msg(proc_expect(&w[0], "its coordinator gone; checkpoint written", 0, line, sizeof(line)), "%s",
                  proc_output_tail(&w[0]));
    unsigned long long step = strtoull(strstr(line, "at step ") + 8, NULL, 10);
    ck_assert_uint_eq(read_info(ckpt).step, step);
    const char *asked = "asking the program to stop (ddp_stop_requested)"; /* the first to ask stops them all */
    ck_assert_msg(strstr(proc_output(&w[0]), asked) || strstr(proc_output(&w[1]), asked), "%s\n%s", proc_output(&w[0]),
                  proc_output_tail(&w[1]));
    for (int r = 0; r < 2; r++)
        proc_close(&w[r]);

    /* back: the next job (generation 2) resumes where they stopped */
    ddpd_start(&d, flags);
    const char *more[] = {DDP_WORKER_PATH, "--data",       dir,  "--model",  MODEL, "--batch-size", "32", "--epochs",
                          "100000",        "--checkpoint", ckpt, "--resume", NULL};
    for (int r = 0; r < 2; r++)
        rank_start(&w[r], &d, 2, r, "lab", more);
    ck_assert_msg(proc_expect(&d.p, "job 'lab' formed: world size 2, generation 2", WAIT_MS, NULL, 0), "%s",
                  proc_output_tail(&d.p));
    char resumed[64];
    snprintf(resumed, sizeof(resumed), "at step %llu,", step);
    ck_assert_msg(proc_expect(&w[0], resumed, WAIT_MS, NULL, 0), "%s", proc_output_tail(&w[0]));
    ck_assert_msg(proc_expect(&w[0], "epoch ", WAIT_MS, NULL, 0), "%s", proc_output_tail(&w[0]));
    for (int r = 0; r < 2; r++)
        proc_signal(&w[r], SIGTERM);
    for (int r = 0; r < 2; r++) {
        ck_assert_msg(proc_wait(&w[r], WAIT_MS) == 128 + SIGTERM, "rank %d: %s", r, proc_output_tail(&w[r]));
        proc_close(&w[r]);
    }
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

/* ddpd with the shim that kills it at the count-th frame of a bucket's bytes (1210 f32). */
static void ddpd_start_dying(ddpd_proc *d, const char *const *flags, const char *count) {
    const char *asan = getenv("ASAN_OPTIONS");
    char asan_env[512], count_env[64]; /* the preloaded library comes before the sanitizer's runtime */
    snprintf(asan_env, sizeof(asan_env), "ASAN_OPTIONS=%s%sverify_asan_link_order=0", asan ? asan : "",
             asan && asan[0] ? ":" : "");
    snprintf(count_env, sizeof(count_env), "DDP_TEST_KILL_AT_SEND_COUNT=%s", count);
    const char *env[] = {"LD_PRELOAD=" KILL_AT_SEND_PATH, "DDP_TEST_KILL_AT_SEND_BYTES=4840", count_env, asan_env,
                         NULL};
    const char *argv[16] = {DDPD_PATH};
    size_t n = 1;
    for (size_t i = 0; flags[i] && n < 15; i++)
        argv[n++] = flags[i];
    proc_start(&d->p, argv, env);
    ck_assert_msg(proc_expect(&d->p, "listening on ", 10000, NULL, 0), "%s", proc_output_tail(&d->p));
}

/* A ps job, whose sums ddpd holds, through a ddpd crash (SIGKILL) and a restart: the ranks
 * rejoin with the step each bucket is at and push again what had no average yet, in
 * shared memory and over ZeroMQ, and end with the checkpoint of a run without the crash,
 * byte for byte. In the last two rounds ddpd dies having sent an average to one rank and not
 * the other (over ZeroMQ to both; in its segment to one, as a frame to the other): the rank
 * that had it gives it back to the next ddpd, which sends it on. */
START_TEST(test_ps_through_ddpd_restart) {
    char reference[128], ckpt[128], listen[128], state[128];
    path_in_dir(reference, sizeof(reference), "ps-reference.ckpt");
    path_in_dir(ckpt, sizeof(ckpt), "ps.ckpt");
    snprintf(listen, sizeof(listen), "ipc://%s/ddpd.sock", dir);
    path_in_dir(state, sizeof(state), "state");
    ck_assert_int_eq(mkdir(state, 0700), 0);
    const char *plain[] = {"--mode", "ps", "--steps", "2000", "--checkpoint", reference, NULL};
    proc p;
    ck_assert_msg(train(&p, 2, plain) == 0, "%s", proc_output_tail(&p));
    proc_close(&p);
    size_t expected_size, size;
    char *expected = read_bytes(reference, &expected_size);
    const char *flags[] = {"--listen", listen, "--state-dir", state, NULL};
    for (int round = 0; round < 6; round++) {
        const char *transport = round % 2 ? "DDP_TRANSPORT=zmq" : "DDP_TRANSPORT=auto";
        bool between = round == 4; /* over ZeroMQ: every average is a frame, sent rank by rank */
        bool mixed = round == 5;   /* rank 0 reads the averages in ddpd's segment, rank 1 gets frames */
        int sig = round < 2 || between || mixed ? SIGKILL : SIGTERM;
        if (between)
            transport = "DDP_TRANSPORT=zmq";
        ddpd_proc d;
        if (between || mixed)
            ddpd_start_dying(&d, flags, between ? "80" : "40"); /* rank 1's average of step 39 */
        else
            ddpd_start(&d, flags);
        const char *argv[] = {
            DDP_RUN_PATH, "-n",      "2",       "--coordinator", listen,         "--",          DDP_WORKER_PATH,
            "--data",     dir,       "--model", MODEL,           "--batch-size", "32",          "--mode",
            "ps",         "--steps", "2000",    "--checkpoint",  ckpt,           "--overwrite", NULL};
        const char *env[] = {transport, "DDP_TIMEOUT_MS=20000", NULL};
        proc w[2];
        if (mixed) {
            char coordinator[160];
            snprintf(coordinator, sizeof(coordinator), "DDP_COORDINATOR=%s", listen);
            for (int r = 0; r < 2; r++) {
                const char *rank_env[] = {coordinator,
                                          "WORLD_SIZE=2",
                                          r ? "RANK=1" : "RANK=0",
                                          "DDP_TIMEOUT_MS=20000",
                                          r ? "DDP_TRANSPORT=zmq" : "DDP_TRANSPORT=auto",
                                          NULL};
                proc_start(&w[r], argv + 6, rank_env);
            }
        } else
            proc_start(&p, argv, env);
        proc *first = mixed ? &w[0] : &p; /* rank 0's output */
        ck_assert_msg(proc_expect(first, "epoch 2:", WAIT_MS, NULL, 0), "%s", proc_output_tail(first));
        if (!between && !mixed)
            proc_signal(&d.p, sig);
        ck_assert_int_eq(proc_wait(&d.p, WAIT_MS), sig == SIGKILL ? 128 + SIGKILL : 0);
        proc_close(&d.p);
        ddpd_start(&d, flags);
        for (int r = 0; r < (mixed ? 2 : 1); r++) {
            proc *q = mixed ? &w[r] : &p;
            ck_assert_msg(proc_wait(q, WAIT_MS) == 0, "%s: %s", transport, proc_output_tail(q));
            assert_output(q, "rejoined ddpd at");
        }
        ck_assert_msg(proc_expect(&d.p, "recovered: every rank is back", WAIT_MS, NULL, 0), "%s",
                      proc_output_tail(&d.p));
        if (between || mixed) { /* rank 0 had it: as a frame, or in the segment */
            assert_output(first, "gave bucket 0's average of step 39 back to ddpd");
            ck_assert_msg(proc_expect(&d.p, "rank 0 gave back bucket 0's average of step 39", WAIT_MS, NULL, 0), "%s",
                          proc_output_tail(&d.p));
        }
        if (mixed)
            proc_close(&w[1]);
        proc_close(first);
        ck_assert_int_eq(ddpd_stop(&d), 0);
        char *got = read_bytes(ckpt, &size);
        ck_assert_msg(size == expected_size && memcmp(got, expected, size) == 0,
                      "%s, ddpd killed by signal %d: the checkpoint differs from the run without it", transport, sig);
        free(got);
    }
    free(expected);
}
END_TEST

/* Usage errors exit 2, as the README's table says, whether they come from a flag, a
 * batch that does not split, or the environment. */
/* A rank loads its data before it joins (a slow load is spent while the job forms, not in
 * the others' first collective): one whose data is bad says so at once, even with no ddpd
 * to join, and one that joins tells the others at once, naming itself. */
START_TEST(test_data_before_join) {
    char nobody[128];
    snprintf(nobody, sizeof(nobody), "DDP_COORDINATOR=ipc://%s/nobody.sock", dir);
    const char *env[] = {nobody, "DDP_CONNECT_TIMEOUT_MS=1000", "WORLD_SIZE=2", "RANK=1", NULL};
    const char *bad[] = {DDP_WORKER_PATH, "--data", "/nonexistent-dir", "--model", MODEL, NULL};
    proc p;
    proc_start(&p, bad, env);
    ck_assert_int_eq(proc_wait(&p, WAIT_MS), 1);
    assert_output(&p, "/nonexistent-dir");
    assert_output(&p, "joining the job to tell the other ranks");
    proc_close(&p);

    ddpd_proc d;
    ddpd_start(&d, NULL);
    const char *good[] = {DDP_WORKER_PATH, "--data", dir, "--model", MODEL, "--batch-size", "32", NULL};
    proc w[2];
    rank_start(&w[0], &d, 2, 0, "bad-data", good);
    rank_start(&w[1], &d, 2, 1, "bad-data", bad);
    ck_assert_int_eq(proc_wait(&w[1], WAIT_MS), 1);
    ck_assert_int_eq(proc_wait(&w[0], WAIT_MS), 1);
    ck_assert_msg(strstr(proc_output(&w[0]), "rank 1") && strstr(proc_output(&w[0]), "/nonexistent-dir"), "%s",
                  proc_output_tail(&w[0]));
    for (int r = 0; r < 2; r++)
        proc_close(&w[r]);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

START_TEST(test_usage_exit_codes) {
    static const struct {
        const char *what;
        const char *args[6];
        const char *env;
        int n;
        const char *expected;
    } cases[] = {
        {"model", {"--model", "garbage"}, NULL, 1, "unknown model 'garbage'"},
        {"device", {"--device", "gpu"}, NULL, 1, "--device 'gpu': use cpu, cuda or cuda:K"},
        {"devices", {"--model", "64-10", "--devices", "cpu,cpu"}, NULL, 1, "has one layer, nothing to split"},
        {"timeout", {NULL}, "DDP_TIMEOUT_MS=soon", 1, "DDP_TIMEOUT_MS='soon' is not an integer"},
        {"config", {"--config", "/dev/zero"}, NULL, 1, "/dev/zero: not a regular file"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *env[] = {cases[i].env, NULL};
        proc p;
        int code = train_env(&p, cases[i].n, cases[i].args, env);
        ck_assert_msg(code == 2, "%s: exit %d, not 2:\n%s", cases[i].what, code, proc_output_tail(&p));
        assert_output(&p, cases[i].expected);
        proc_close(&p);
    }
    /* A batch that does not split over 4: the rank that finds it first exits 2 (the others
     * may find it too, or fail with 1 naming it: its abort can reach them first). */
    ddpd_proc d;
    ddpd_start(&d, NULL);
    const char *split[] = {DDP_WORKER_PATH, "--data", dir, "--model", MODEL, "--batch-size", "30", NULL};
    proc r4[4];
    for (int r = 0; r < 4; r++)
        rank_start(&r4[r], &d, 4, r, "split", split);
    int usage = 0;
    for (int r = 0; r < 4; r++) {
        int code = proc_wait(&r4[r], WAIT_MS);
        ck_assert_msg(code == 2 || code == 1, "rank %d: exit %d: %s", r, code, proc_output_tail(&r4[r]));
        if (code == 2) {
            ck_assert_msg(strstr(proc_output(&r4[r]), "--batch-size 30 does not split evenly over 4 workers"), "%s",
                          proc_output_tail(&r4[r]));
            usage++;
        }
        proc_close(&r4[r]);
    }
    ck_assert_int_ge(usage, 1);
    /* RANK out of range for the world, given to the worker itself */
    const char *argv[] = {DDP_WORKER_PATH, "--data", dir, "--model", MODEL, NULL};
    proc w;
    rank_start(&w, &d, 2, 7, "bad-rank", argv);
    ck_assert_int_eq(proc_wait(&w, WAIT_MS), 2);
    ck_assert_msg(strstr(proc_output(&w), "RANK='7'"), "%s", proc_output_tail(&w));
    proc_close(&w);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

/* The CUDA backend is a module ddp-worker loads when a GPU is asked for. Where the build
 * has it, --device cuda:0 reaches the CUDA runtime (with no GPU visible, it says so); a
 * ddp-worker copied away from the module names the file it cannot load. Without it, the
 * worker says it was built without. A CPU worker never loads it (ldd has no CUDA). */
START_TEST(test_cuda_module) {
    const char *args[] = {"--device", "cuda:0", "--steps", "1", NULL};
    const char *hidden[] = {"CUDA_VISIBLE_DEVICES=", NULL};
    proc p;
    int code = train_env(&p, 1, args, hidden);
    ck_assert_msg(code == 1, "exit %d: %s", code, proc_output_tail(&p));
#ifdef DDP_HAVE_CUDA
    assert_output(&p, "--device cuda:0: no ");
    ck_assert_msg(!strstr(proc_output(&p), "cannot load"), "%s", proc_output_tail(&p));
    proc_close(&p);
    char copy[128], cmd[512];
    path_in_dir(copy, sizeof(copy), "ddp-worker");
    snprintf(cmd, sizeof(cmd), "cp %s %s", DDP_WORKER_PATH, copy);
    ck_assert_int_eq(system(cmd), 0);
    const char *argv[] = {DDP_RUN_PATH, "-n",      "1",   "--",       copy,     "--data",
                          dir,          "--model", MODEL, "--device", "cuda:0", NULL};
    proc_start(&p, argv, NULL);
    ck_assert_int_eq(proc_wait(&p, WAIT_MS), 1);
    assert_output(&p, "--device cuda:0: cannot load the CUDA backend: ");
    assert_output(&p, "/backend_cuda.so: cannot open shared object file");
#else
    assert_output(&p, "built without the CUDA backend");
#endif
    proc_close(&p);
    snprintf(cmd, sizeof(cmd), "ldd %s | grep -E 'libcuda|libcublas|libnccl'", DDP_WORKER_PATH);
    ck_assert_msg(system(cmd) != 0, "ddp-worker links CUDA's libraries: %s", cmd);
}
END_TEST

/* Counts a metrics file's step and epoch lines, and whether any is past max_step. */
static void count_lines(const char *path, int *ret_steps, int *ret_epochs, double *ret_last_step) {
    char *text = read_text(path);
    *ret_steps = *ret_epochs = 0;
    *ret_last_step = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_ParseWithOpts(line, NULL, true); /* one object, nothing glued after it */
        ck_assert_msg(j, "not one JSON object: %s", line);
        const char *type = cJSON_GetObjectItem(j, "type")->valuestring;
        *ret_steps += !strcmp(type, "step");
        *ret_epochs += !strcmp(type, "epoch");
        double step = cJSON_GetObjectItem(j, "step")->valuedouble;
        *ret_last_step = step > *ret_last_step ? step : *ret_last_step;
        cJSON_Delete(j);
    }
    free(text);
}

/* --resume continues --metrics: the first epoch's lines stay, lines written after the
 * checkpoint (lost work) go, the second epoch's follow; a --resume that finds no
 * checkpoint leaves them alone. */
START_TEST(test_metrics_across_resume) {
    char ckpt[128], metrics[128];
    path_in_dir(ckpt, sizeof(ckpt), "m.ckpt");
    path_in_dir(metrics, sizeof(metrics), "m.jsonl");
    const char *first[] = {"--checkpoint", ckpt, "--metrics", metrics, "--epochs", "1", NULL};
    proc p;
    ck_assert_int_eq(train(&p, 1, first), 0);
    proc_close(&p);
    int steps, epochs;
    double last;
    count_lines(metrics, &steps, &epochs, &last);
    ck_assert_int_eq(steps, 8); /* 256 samples, batch 32 */
    ck_assert_int_eq(epochs, 1);
    FILE *f = fopen(metrics, "a"); /* what a run that died after the checkpoint would have left */
    fputs("{\"type\":\"step\",\"step\":999,\"loss\":1}\n", f);
    fclose(f);
    const char *second[] = {"--checkpoint", ckpt, "--metrics", metrics, "--epochs", "2", "--resume", NULL};
    ck_assert_int_eq(train(&p, 1, second), 0);
    proc_close(&p);
    count_lines(metrics, &steps, &epochs, &last);
    ck_assert_int_eq(steps, 16);
    ck_assert_int_eq(epochs, 2);
    ck_assert_double_eq(last, 16);

    /* --resume that finds no checkpoint (a wrong path, a filesystem not mounted yet) does
     * not start over the earlier run's lines: refused, the file as it was */
    char elsewhere[128];
    path_in_dir(elsewhere, sizeof(elsewhere), "not-there.ckpt");
    const char *lost[] = {"--checkpoint", elsewhere, "--metrics", metrics, "--epochs", "1", "--resume", NULL};
    ck_assert_int_eq(train(&p, 1, lost), 2);
    assert_output(&p, "yet --metrics");
    assert_output(&p, "has lines of an earlier run that saved one (an epoch ended at step 8): not starting over them");
    proc_close(&p);
    count_lines(metrics, &steps, &epochs, &last);
    ck_assert_int_eq(steps, 16);
    ck_assert_double_eq(last, 16);
    /* a run that crashed before its first checkpoint left step lines only: lost work,
     * dropped, and the next --resume starts from the beginning */
    char early[128];
    path_in_dir(early, sizeof(early), "early.jsonl");
    f = fopen(early, "w");
    fputs("{\"type\":\"step\",\"step\":1,\"loss\":1}\n{\"type\":\"step\",\"step\":2,\"loss\":1}\n", f);
    fclose(f);
    const char *after_crash[] = {"--checkpoint", elsewhere, "--metrics", early, "--epochs", "1", "--resume", NULL};
    ck_assert_msg(train(&p, 1, after_crash) == 0, "%s", proc_output_tail(&p));
    proc_close(&p);
    count_lines(early, &steps, &epochs, &last);
    ck_assert_int_eq(steps, 8);
    ck_assert_int_eq(epochs, 1);
}
END_TEST

/* An epoch trained in two parts (stopped by --steps, resumed inside it): each part's line
 * says which steps its loss and rate are of, and so do the metrics' epoch lines. */
START_TEST(test_partial_epoch_lines) {
    char ckpt[128], metrics[128];
    path_in_dir(ckpt, sizeof(ckpt), "part.ckpt");
    path_in_dir(metrics, sizeof(metrics), "part.jsonl");
    const char *first[] = {"--checkpoint", ckpt, "--metrics", metrics, "--steps", "5", NULL};
    proc p;
    ck_assert_int_eq(train(&p, 1, first), 0);
    assert_output(&p, "epoch 1 (steps 1-5 of 8): loss ");
    proc_close(&p);
    const char *rest[] = {"--checkpoint", ckpt, "--metrics", metrics, "--epochs", "2", "--resume", NULL};
    ck_assert_int_eq(train(&p, 1, rest), 0);
    assert_output(&p, "epoch 1 (steps 6-8 of 8): loss ");
    assert_output(&p, "epoch 2: loss "); /* a whole one says nothing more */
    proc_close(&p);
    char *text = read_text(metrics);
    ck_assert_msg(strstr(text, "\"first_step_in_epoch\":5,\"steps\":3"), "%s", text);
    ck_assert_msg(strstr(text, "\"first_step_in_epoch\":0,\"steps\":8"), "%s", text);
    free(text);
}
END_TEST

/* A metrics file that cannot be written: said once, training finishes, the exit is 1; so
 * is the worker's own output. */
START_TEST(test_metrics_write_error) {
    const char *args[] = {"--metrics", "/dev/full", "--epochs", "1", NULL};
    proc p;
    ck_assert_int_eq(train(&p, 1, args), 1);
    assert_output(&p, "--metrics /dev/full: cannot write: No space left on device");
    assert_output(&p, "RESULT ");
    assert_output(&p, "trained, but --metrics /dev/full could not be written");
    proc_close(&p);
    /* its own output on a full disk: trained, but not a run that went well (exit 1) */
    const char *full[] = {
        DDP_RUN_PATH,    "-n",     "1", "--",      "/bin/sh", "-c",           "exec \"$0\" \"$@\" > /dev/full",
        DDP_WORKER_PATH, "--data", dir, "--model", MODEL,     "--batch-size", "32",
        "--epochs",      "1",      NULL};
    proc_start(&p, full, NULL);
    ck_assert_int_eq(proc_wait(&p, WAIT_MS), 1);
    assert_output(&p, "ddp-worker: rank 0: its output could not be written");
    proc_close(&p);
    /* a pipe (the test reads the worker's output through one): written, and not an error
     * that it cannot be synced to disk before a checkpoint */
    const char *piped[] = {"--metrics", "/dev/stdout", "--epochs", "1", NULL};
    ck_assert_msg(train(&p, 1, piped) == 0, "%s", proc_output_tail(&p));
    assert_output(&p, "\"type\":\"epoch\"");
    proc_close(&p);
}
END_TEST

/* A --metrics FIFO whose reader goes away: the write fails (EPIPE, where SIGPIPE used to
 * kill the rank without its checkpoint), said once; training goes to its end, exit 1. */
START_TEST(test_metrics_reader_gone) {
    char fifo[128], needle[256];
    path_in_dir(fifo, sizeof(fifo), "metrics.fifo");
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    /* the test's only: with O_CLOEXEC no child keeps the read end when it is closed */
    int reader = open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    ck_assert_int_ge(reader, 0);
    /* more lines than a pipe holds, none read: the worker still writes when the reader goes */
    const char *args[] = {"--metrics", fifo, "--epochs", "60", NULL};
    proc p;
    train_start(&p, 1, args, NULL);
    ck_assert_msg(proc_expect(&p, "steps an epoch", WAIT_MS, NULL, 0), "%s", proc_output_tail(&p)); /* it opened it */
    close(reader);
    int code = proc_wait(&p, WAIT_MS);
    ck_assert_msg(code == 1, "exit %d: %s", code, proc_output_tail(&p));
    snprintf(needle, sizeof(needle), "--metrics %s: cannot write: Broken pipe; no more lines go there", fifo);
    assert_output(&p, needle);
    assert_output(&p, "RESULT ");
    proc_close(&p);
}
END_TEST

/* A --metrics FIFO that nobody reads: refused at once, naming it (the open used to wait for
 * a reader for ever, after the job had formed, and SIGTERM could not end it). */
START_TEST(test_metrics_fifo_without_reader) {
    char fifo[128], needle[256];
    path_in_dir(fifo, sizeof(fifo), "metrics.fifo");
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    const char *args[] = {"--metrics", fifo, "--steps", "2", NULL};
    proc p;
    train_start(&p, 1, args, NULL);
    int code = proc_wait(&p, 20000);
    if (code != 1) { /* a worker left in open(): a reader releases it, to end as it may */
        int fd = open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd >= 0)
            close(fd);
    }
    ck_assert_msg(code == 1, "exit %d: %s", code, proc_output_tail(&p));
    snprintf(needle, sizeof(needle), "--metrics %s: a FIFO with no reader", fifo);
    assert_output(&p, needle);
    proc_close(&p);
}
END_TEST

/* A metrics file whose last line lost its newline (a crash in the middle of a write):
 * --resume drops that line, saying so, instead of gluing the next one to it. */
START_TEST(test_metrics_line_cut_short) {
    char ckpt[128], metrics[128];
    path_in_dir(ckpt, sizeof(ckpt), "cut.ckpt");
    path_in_dir(metrics, sizeof(metrics), "cut.jsonl");
    const char *first[] = {"--checkpoint", ckpt, "--metrics", metrics, "--epochs", "1", NULL};
    proc p;
    ck_assert_msg(train(&p, 1, first) == 0, "%s", proc_output_tail(&p));
    proc_close(&p);
    size_t size;
    char *text = read_bytes(metrics, &size);
    ck_assert(size > 0 && text[size - 1] == '\n');
    free(text);
    ck_assert_int_eq(truncate(metrics, (off_t)size - 1), 0); /* the epoch line, whole but for its end */
    const char *second[] = {"--checkpoint", ckpt, "--metrics", metrics, "--epochs", "2", "--resume", NULL};
    ck_assert_msg(train(&p, 1, second) == 0, "%s", proc_output_tail(&p));
    assert_output(&p, "its last line has no end");
    proc_close(&p);
    int steps, epochs;
    double last;
    count_lines(metrics, &steps, &epochs, &last);
    ck_assert_int_eq(steps, 16);
    ck_assert_int_eq(epochs, 1); /* the second's: the first's was the line cut short */
    ck_assert_double_eq(last, 16);
}
END_TEST

/* A stop that lands at an epoch's last step (here every one does: 8 steps an epoch, and
 * the ranks agree every 8) evaluates that epoch and writes its metrics line before the
 * checkpoint: --resume starts the next epoch and would never write it. */
START_TEST(test_stop_at_an_epoch_end) {
    char ckpt[128], metrics[128];
    path_in_dir(ckpt, sizeof(ckpt), "stop.ckpt");
    path_in_dir(metrics, sizeof(metrics), "stop.jsonl");
    ddpd_proc d;
    ddpd_start(&d, NULL);
    const char *argv[] = {
        DDP_WORKER_PATH, "--data", dir,         "--model", MODEL, "--batch-size", "32", "--epochs", "100000",
        "--checkpoint",  ckpt,     "--metrics", metrics,   NULL};
    proc w[2];
    for (int r = 0; r < 2; r++)
        rank_start(&w[r], &d, 2, r, "stop", argv);
    ck_assert_msg(proc_expect(&w[0], "epoch 2:", WAIT_MS, NULL, 0), "%s", proc_output_tail(&w[0]));
    proc_signal(&w[0], SIGTERM);
    for (int r = 0; r < 2; r++)
        ck_assert_int_eq(proc_wait(&w[r], WAIT_MS), 128 + SIGTERM);
    ck_assert_msg(proc_expect(&w[0], "stopped by a signal at step", 0, NULL, 0), "%s", proc_output_tail(&w[0]));
    checkpoint_info info = read_info(ckpt);
    ck_assert_uint_eq(info.step_in_epoch, 0); /* it stopped at an epoch's end */
    int steps, epochs;
    double last;
    count_lines(metrics, &steps, &epochs, &last);
    ck_assert_int_eq(epochs, (int)info.epoch);
    ck_assert_int_eq(steps, (int)info.step);
    for (int r = 0; r < 2; r++)
        proc_close(&w[r]);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

/* A --resume rank 0 refuses (a checkpoint of another model, other settings) exits 2 on
 * every rank, the others saying that rank 0 refused it (not "could not read", exit 1). */
START_TEST(test_resume_refused_on_every_rank) {
    char ckpt[128];
    path_in_dir(ckpt, sizeof(ckpt), "two.ckpt");
    const char *first[] = {"--checkpoint", ckpt, "--steps", "2", NULL};
    proc p;
    ck_assert_msg(train(&p, 2, first) == 0, "%s", proc_output_tail(&p));
    proc_close(&p);
    ddpd_proc d;
    ddpd_start(&d, NULL);
    static const struct {
        const char *flag, *value, *job, *rank0_says;
    } cases[] = {
        {"--model", "64-10", "other-model", "a checkpoint of model '" MODEL "'"},
        {"--lr", "0.5", "other-lr", "it would not continue the same run"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *argv[] = {DDP_WORKER_PATH,
                              "--data",
                              dir,
                              "--model",
                              MODEL,
                              "--batch-size",
                              "32",
                              "--steps",
                              "4",
                              "--checkpoint",
                              ckpt,
                              "--resume",
                              cases[i].flag,
                              cases[i].value,
                              NULL};
        proc w[2];
        for (int r = 0; r < 2; r++)
            rank_start(&w[r], &d, 2, r, cases[i].job, argv);
        for (int r = 0; r < 2; r++) {
            int code = proc_wait(&w[r], WAIT_MS);
            ck_assert_msg(code == 2, "%s: rank %d: exit %d: %s", cases[i].flag, r, code, proc_output_tail(&w[r]));
        }
        ck_assert_msg(strstr(proc_output(&w[0]), cases[i].rank0_says), "%s", proc_output_tail(&w[0]));
        ck_assert_msg(strstr(proc_output(&w[1]), "--resume: rank 0 refused"), "%s", proc_output_tail(&w[1]));
        ck_assert_msg(!strstr(proc_output(&w[1]), "could not read"), "%s", proc_output_tail(&w[1]));
        for (int r = 0; r < 2; r++)
            proc_close(&w[r]);
    }
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

/* A checkpoint 5 steps into an epoch of 8, resumed on data with 4 steps an epoch, or on as
 * many samples of other data: refused (exit 2), naming the file and what differs, not an
 * empty epoch of loss nan, nor another run's order of samples taken up midway. */
START_TEST(test_resume_past_the_epoch) {
    char ckpt[128], half[128], needle[300];
    path_in_dir(ckpt, sizeof(ckpt), "past.ckpt");
    path_in_dir(half, sizeof(half), "half-data");
    ck_assert_int_eq(mkdir(half, 0755), 0);
    idx_write_split(half, "train", 128, 8, 1);
    idx_write_split(half, "t10k", 64, 8, 2);
    const char *first[] = {"--checkpoint", ckpt, "--steps", "5", NULL};
    proc p;
    ck_assert_msg(train(&p, 1, first) == 0, "%s", proc_output_tail(&p));
    proc_close(&p);
    ck_assert_uint_eq(read_info(ckpt).step_in_epoch, 5);
    const char *smaller[] = {"--data", half, "--checkpoint", ckpt, "--resume", "--steps", "8", NULL};
    int code = train(&p, 1, smaller);
    ck_assert_msg(code == 2, "exit %d: %s", code, proc_output_tail(&p));
    snprintf(needle, sizeof(needle),
             "--resume: %s was trained on other data (256 training samples, here 128): it would not continue", ckpt);
    assert_output(&p, needle);
    ck_assert_msg(!strstr(proc_output(&p), "nan"), "%s", proc_output_tail(&p));
    proc_close(&p);
    /* as many samples, others: the order would be another run's */
    path_in_dir(half, sizeof(half), "other-data");
    ck_assert_int_eq(mkdir(half, 0755), 0);
    idx_write_split(half, "train", 256, 8, 7);
    idx_write_split(half, "t10k", 64, 8, 2);
    ck_assert_int_eq(train(&p, 1, smaller), 2);
    snprintf(needle, sizeof(needle), "--resume: %s was trained on other data (256 training samples, other labels",
             ckpt);
    assert_output(&p, needle);
    proc_close(&p);
}
END_TEST

/* Resume with other settings is refused; resuming a finished run says there is nothing to
 * do and reports the real accuracy; the resume line counts epochs done. */
START_TEST(test_resume_edges) {
    char ckpt[128];
    path_in_dir(ckpt, sizeof(ckpt), "r.ckpt");
    const char *first[] = {"--checkpoint", ckpt, "--epochs", "1", NULL};
    proc p;
    ck_assert_int_eq(train(&p, 1, first), 0);
    char line[256];
    ck_assert(proc_expect(&p, "RESULT ", 0, line, sizeof(line)));
    char accuracy[32];
    snprintf(accuracy, sizeof(accuracy), "%s", strstr(line, "test_acc="));
    proc_close(&p);
    const char *done[] = {"--checkpoint", ckpt, "--epochs", "1", "--resume", NULL};
    ck_assert_int_eq(train(&p, 1, done), 0);
    assert_output(&p, "resumed from");
    assert_output(&p, "at step 8, after epoch 1");
    assert_output(&p, "nothing left to train: the run is at step 8, 1 epoch done");
    assert_output(&p, accuracy);
    ck_assert_msg(!strstr(proc_output(&p), "nan") && !strstr(proc_output(&p), "epoch 2"), "%s", proc_output_tail(&p));
    proc_close(&p);
    static const char *const changes[][2] = {{"--sampler", "global"}, {"--lr", "0.5"}, {"--momentum", "0.9"}};
    for (int i = 0; i < 3; i++) {
        const char *other[] = {"--checkpoint", ckpt, "--epochs", "2", "--resume", changes[i][0], changes[i][1], NULL};
        ck_assert_msg(train(&p, 1, other) == 2, "%s: %s", changes[i][0], proc_output_tail(&p));
        assert_output(&p, "it would not continue the same run");
        proc_close(&p);
    }
}
END_TEST

/* As root: a device node at --checkpoint or ddpd's --metrics-file is refused and stays a
 * device (it used to be replaced by a regular file). */
START_TEST(test_device_nodes) {
    char full[128];
    path_in_dir(full, sizeof(full), "full");
    ck_assert_int_eq(mknod(full, S_IFCHR | 0666, makedev(1, 7)), 0); /* what /dev/full is */
    const char *args[] = {"--checkpoint", full, "--steps", "2", NULL};
    proc p;
    ck_assert_int_eq(train(&p, 1, args), 2);
    assert_output(&p, "a character device, not a regular file");
    proc_close(&p);
    struct stat st;
    ck_assert_int_eq(lstat(full, &st), 0);
    ck_assert(S_ISCHR(st.st_mode));
    const char *ddpd[] = {DDPD_PATH, "--listen", "tcp://127.0.0.1:*", "--metrics-file", full, NULL};
    proc_start(&p, ddpd, NULL);
    ck_assert_int_eq(proc_wait(&p, WAIT_MS), 2);
    assert_output(&p, "--metrics-file ");
    assert_output(&p, "a character device, not a regular file");
    proc_close(&p);
    ck_assert_int_eq(lstat(full, &st), 0);
    ck_assert(S_ISCHR(st.st_mode));
}
END_TEST

/* --checkpoint-keep 2 over three epochs of 8 steps: the checkpoint, and links to the last
 * two (steps 16 and 24); the first one's link is gone, and so is the link a killed run left
 * before its rename (PATH.40.new). */
START_TEST(test_checkpoint_keep) {
    char ckpt[128], link[160];
    path_in_dir(ckpt, sizeof(ckpt), "ckpt");
    const char *args[] = {"--checkpoint", ckpt, "--epochs", "3", "--checkpoint-keep", "2", NULL};
    char copy[160]; /* a user's copy whose name reads as step 24 with a leading zero: not a link */
    snprintf(copy, sizeof(copy), "%s.024", ckpt);
    FILE *f = fopen(copy, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    char left[160], older[160], users[160]; /* killed runs' links, not renamed yet; a user's file */
    snprintf(left, sizeof(left), "%s.40.new", ckpt);
    snprintf(older, sizeof(older), "%s.48.new-4242", ckpt); /* as earlier versions named them */
    snprintf(users, sizeof(users), "%s.040.new", ckpt);
    const char *made[] = {left, older, users};
    for (int i = 0; i < 3; i++) {
        ck_assert_ptr_nonnull(f = fopen(made[i], "w"));
        fclose(f);
    }
    proc p;
    ck_assert_msg(train(&p, 1, args) == 0, "%s", proc_output_tail(&p));
    ck_assert_msg(access(left, F_OK) < 0 && access(older, F_OK) < 0, "%s and %s should be gone", left, older);
    ck_assert_int_eq(unlink(users), 0);
    proc_close(&p);
    ck_assert_uint_eq(read_info(ckpt).step, 24);
    static const int kept[] = {16, 24};
    for (int i = 0; i < 2; i++) {
        snprintf(link, sizeof(link), "%s.%d", ckpt, kept[i]);
        ck_assert_uint_eq(read_info(link).step, (unsigned)kept[i]);
    }
    ck_assert_int_eq(access(copy, F_OK), 0);
    ck_assert_int_eq(unlink(copy), 0);
    snprintf(link, sizeof(link), "%s.8", ckpt);
    ck_assert_msg(access(link, F_OK) < 0, "%s should be gone", link);
    /* a new run over the same path, with the first run's links at steps past its own: they
     * are not this run's to remove, nor above the link it just made */
    const char *again[] = {"--checkpoint", ckpt, "--epochs", "1", "--checkpoint-keep", "2", "--overwrite", NULL};
    ck_assert_msg(train(&p, 1, again) == 0, "%s", proc_output_tail(&p));
    proc_close(&p);
    static const int after[] = {8, 16, 24};
    for (int i = 0; i < 3; i++) {
        snprintf(link, sizeof(link), "%s.%d", ckpt, after[i]);
        ck_assert_uint_eq(read_info(link).step, (unsigned)after[i]);
    }
    /* another run's link at a step this one never saves at (a stop mid-epoch), below its
     * own: it neither counts among this run's 2 (this run's step 16 stayed, step 12 went)
     * nor goes */
    char foreign[160];
    snprintf(foreign, sizeof(foreign), "%s.12", ckpt);
    char theirs[160];
    snprintf(theirs, sizeof(theirs), "%s.24", ckpt);
    ck_assert_int_eq(linkat(AT_FDCWD, theirs, AT_FDCWD, foreign, 0), 0);
    const char *third[] = {"--checkpoint", ckpt, "--epochs", "3", "--checkpoint-keep", "2", "--overwrite", NULL};
    ck_assert_msg(train(&p, 1, third) == 0, "%s", proc_output_tail(&p));
    proc_close(&p);
    snprintf(link, sizeof(link), "%s.8", ckpt);
    ck_assert_msg(access(link, F_OK) < 0, "%s should be gone", link);
    ck_assert_msg(access(foreign, F_OK) == 0, "%s, another run's, was removed", foreign);
    for (int step = 16; step <= 24; step += 8) {
        snprintf(link, sizeof(link), "%s.%d", ckpt, step);
        ck_assert_uint_eq(read_info(link).step, (unsigned)step);
    }
}
END_TEST

/* As root: a checkpoint on a filesystem with room for one. The first save is written; the
 * next two fail, each reported with the path and the error while training goes on to the
 * end; the run then fails, saying so, and the first checkpoint is intact. */
START_TEST(test_checkpoint_disk_full) {
    char small[128], ckpt[160], cmd[256];
    path_in_dir(small, sizeof(small), "small");
    ck_assert_int_eq(mkdir(small, 0755), 0);
    snprintf(cmd, sizeof(cmd), "mount -t tmpfs -o size=16k tmpfs %s", small); /* 4 pages; a checkpoint takes 3 */
    ck_assert_int_eq(system(cmd), 0);
    snprintf(ckpt, sizeof(ckpt), "%s/ckpt", small);
    const char *args[] = {"--checkpoint", ckpt, "--epochs", "3", NULL};
    proc p;
    ck_assert_msg(train(&p, 1, args) == 1, "%s", proc_output_tail(&p));
    for (int step = 16; step <= 24; step += 8) {
        char needle[256];
        snprintf(needle, sizeof(needle), "checkpoint of step %d not written: --checkpoint %s: ", step, ckpt);
        assert_output(&p, needle);
    }
    assert_output(&p, "No space left on device (the one of step 8 stays); training goes on");
    assert_output(&p, "epoch 3: ");
    assert_output(&p, "trained to step 24, but the last checkpoint save failed: ");
    proc_close(&p);
    ck_assert_uint_eq(read_info(ckpt).step, 8);
    snprintf(cmd, sizeof(cmd), "test $(ls -A %s | wc -l) = 1", small); /* no temporary file left */
    ck_assert_int_eq(system(cmd), 0);
    snprintf(cmd, sizeof(cmd), "umount %s", small);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* Ranks started with other settings (a host's own DDP_WORKER_* variables or config file):
 * every rank refuses before any step, exit 2, the one that differs naming the flag and
 * both values (they trained on without a word: parameters apart, shards overlapping). */
START_TEST(test_ranks_disagree) {
    static const struct {
        const char *variable, *needle;
    } cases[] = {
        {"DDP_WORKER_LR=0.5", "--lr: this rank has 0.5, rank 0 0.01: every rank must train alike"},
        {"DDP_WORKER_SEED=7", "--seed: this rank has 7, rank 0 1234"},
        {"DDP_WORKER_BATCH_SIZE=64", "--batch-size: this rank has 64, rank 0 128"},
        {"DDP_WORKER_SAMPLER=global", "--sampler: this rank has 'global', rank 0 another"},
    };
    ddpd_proc d;
    ddpd_start(&d, NULL);
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        char job[32];
        snprintf(job, sizeof(job), "disagree-%zu", k);
        proc w[2];
        for (int r = 0; r < 2; r++) {
            const char *argv[] = {"/usr/bin/env",
                                  r == 1 ? cases[k].variable : "DDP_WORKER_STEPS=4",
                                  DDP_WORKER_PATH,
                                  "--data",
                                  dir,
                                  "--model",
                                  MODEL,
                                  "--steps",
                                  "4",
                                  NULL};
            rank_start(&w[r], &d, 2, r, job, argv);
        }
        for (int r = 0; r < 2; r++) {
            int code = proc_wait(&w[r], WAIT_MS);
            ck_assert_msg(code == 2, "%s: rank %d exited %d: %s", cases[k].variable, r, code, proc_output_tail(&w[r]));
            assert_output(&w[r], r == 1 ? cases[k].needle : "another rank's settings are not rank 0's");
            proc_close(&w[r]);
        }
    }
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

static TCase *add_case(Suite *s, TCase *tc) {
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, CASE_TIMEOUT_S);
    suite_add_tcase(s, tc);
    return tc;
}

int main(int argc, char **argv) {
    if (check_selected(argc, argv, "as-root") && geteuid() != 0)
        return check_skip("as-root", "device nodes and a small filesystem need root (mknod, mount)");
    Suite *s = suite_create("worker");
    TCase *files = add_case(s, tcase_create("files"));
    tcase_add_test(files, test_not_regular_files);
    tcase_add_test(files, test_symlink_written_through);
    tcase_add_test(files, test_bad_checkpoint_directory);
    tcase_add_test(files, test_existing_checkpoint);
    TCase *signals = add_case(s, tcase_create("signals"));
    tcase_add_test(signals, test_sighup_keeps_the_checkpoint);
    tcase_add_test(signals, test_sigterm_twice_keeps_the_checkpoint);
    tcase_add_test(signals, test_interrupted_while_forming);
    tcase_add_test(signals, test_stop_at_an_epoch_end);
    TCase *exits = add_case(s, tcase_create("exits"));
    tcase_add_test(exits, test_ranks_disagree);
    tcase_add_test(exits, test_usage_exit_codes);
    tcase_add_test(exits, test_data_before_join);
    tcase_add_test(exits, test_metrics_write_error);
    tcase_add_test(exits, test_cuda_module);
    TCase *resume = add_case(s, tcase_create("resume"));
    tcase_add_test(resume, test_metrics_across_resume);
    tcase_add_test(resume, test_partial_epoch_lines);
    tcase_add_test(resume, test_resume_edges);
    tcase_add_test(resume, test_checkpoint_keep);
    tcase_add_test(resume, test_resume_refused_on_every_rank);
    tcase_add_test(resume, test_resume_past_the_epoch);
    TCase *metrics = add_case(s, tcase_create("metrics"));
    tcase_add_test(metrics, test_metrics_reader_gone);
    tcase_add_test(metrics, test_metrics_fifo_without_reader);
    tcase_add_test(metrics, test_metrics_line_cut_short);
    TCase *coordinator = add_case(s, tcase_create("coordinator"));
    tcase_add_test(coordinator, test_coordinator_restart_and_loss);
    TCase *ps_restart = add_case(s, tcase_create("ps-restart"));
    tcase_add_test(ps_restart, test_ps_through_ddpd_restart);
    TCase *root = add_case(s, tcase_create("as-root"));
    tcase_add_test(root, test_device_nodes);
    tcase_add_test(root, test_checkpoint_disk_full);
    return check_main(s, argc, argv);
}
