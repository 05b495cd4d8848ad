/* ddp-worker end to end, on loopback: equivalence of the modes and world sizes, resume,
 * bad inputs, metrics; on a small synthetic dataset written for the test (and a smoke run
 * on Fashion-MNIST where Debian's dataset is installed). */
#define _GNU_SOURCE /* memfd_create */
#include <cJSON.h>
#include <cblas.h>
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/clock.h"
#include "common/fd_socket.h"
#include "tests/check_main.h"
#include "tests/integration/harness.h"
#include "worker/trainer/blas_kernels.h"
#include "worker/trainer/checkpoint.h"

#define WAIT_MS 120000     /* one launch, at most */
#define CASE_TIMEOUT_S 150 /* a case, at most; under CTest's 180 s (tests/CMakeLists.txt) */
#define FASHION_MNIST "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"
#define SIDE 8 /* 8x8 images: the model is 64-16-10 */
#define MODEL "64-16-10"

static char dir[64];

static void setup(void) {
    snprintf(dir, sizeof(dir), "/tmp/check_training_%d", (int)getpid());
    mkdir(dir, 0755);
    idx_write_split(dir, "train", 512, SIDE, 1);
    idx_write_split(dir, "t10k", 128, SIDE, 2);
}

static void teardown(void) {
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* ddp-run -n n -- ddp-worker --data DIR --model 64-16-10 ARGS...; returns its exit code. */
static int train(proc *p, int n, const char *const *args) {
    char n_text[8];
    snprintf(n_text, sizeof(n_text), "%d", n);
    const char *argv[40] = {DDP_RUN_PATH, "-n", n_text, "--", DDP_WORKER_PATH, "--data", dir, "--model", MODEL};
    size_t k = 9;
    for (size_t i = 0; args && args[i] && k < 39; i++)
        argv[k++] = args[i];
    argv[k] = NULL;
    proc_start(p, argv, NULL);
    return proc_wait(p, WAIT_MS);
}

static float *read_params(const char *path, size_t *ret_n) {
    checkpoint_info expect = {.model = MODEL, .n_params = 64 * 16 + 16 + 16 * 10 + 10}, info;
    float *params = malloc(expect.n_params * sizeof(float));
    char err[512];
    int r = checkpoint_read(path, &expect, &info, params, NULL, err, sizeof(err));
    ck_assert_msg(r == 0, "%s", err);
    *ret_n = expect.n_params;
    return params;
}

/* max |a - b| / max |a| */
static double relative_difference(const float *a, const float *b, size_t n) {
    double diff = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        diff = fmax(diff, fabs((double)a[i] - b[i]));
        scale = fmax(scale, fabs((double)a[i]));
    }
    return diff / scale;
}

/* With the global sampler, 20 steps of N workers give the parameters of 1 worker, in
 * every mode, and the modes agree with each other. */
START_TEST(test_equivalence) {
    static const char *const modes[] = {"ddp", "dp", "ps"};
    static const int worlds[] = {1, 2, 4};
    float *reference = NULL;
    size_t n = 0;
    for (int mi = 0; mi < 3; mi++)
        for (int wi = 0; wi < 3; wi++) {
            char ckpt[128];
            snprintf(ckpt, sizeof(ckpt), "%s/%s-%d.ckpt", dir, modes[mi], worlds[wi]);
            const char *args[] = {"--mode", modes[mi], "--sampler", "global",       "--steps", "20", "--batch-size",
                                  "32",     "--lr",    "0.1",       "--checkpoint", ckpt,      NULL};
            proc p;
            int code = train(&p, worlds[wi], args);
            ck_assert_msg(code == 0, "%s on %d: exit %d: %s", modes[mi], worlds[wi], code, proc_output_tail(&p));
            proc_close(&p);
            float *params = read_params(ckpt, &n);
            if (!reference) {
                reference = params;
                continue;
            }
            double d = relative_difference(reference, params, n);
            ck_assert_msg(d <= 1e-5, "%s on %d workers differs from ddp on 1 by %g (relative)", modes[mi], worlds[wi],
                          d);
            free(params);
        }
    /* and training moved the parameters: the comparison is not of two initial states */
    const char *args[] = {"--sampler", "global", "--steps", "1", "--batch-size", "32", "--checkpoint", "", NULL};
    char first[128];
    snprintf(first, sizeof(first), "%s/one-step.ckpt", dir);
    args[7] = first;
    proc p;
    ck_assert_int_eq(train(&p, 1, args), 0);
    proc_close(&p);
    float *one = read_params(first, &n);
    ck_assert_msg(relative_difference(reference, one, n) > 1e-3, "20 steps did not move the parameters");
    free(one);
    free(reference);
}
END_TEST

static void read_file(const char *path, char **ret, size_t *ret_size);

/* Every transport trains the same bits: each mode on two workers over shared memory (the
 * collectives, and ps's pushes through ddpd's segments) and over ZeroMQ (frames) gives the
 * same checkpoint, byte for byte. */
START_TEST(test_transports) {
    static const char *const modes[] = {"ddp", "dp", "ps"};
    for (int mi = 0; mi < 3; mi++) {
        char *bytes[2] = {NULL, NULL};
        size_t sizes[2];
        for (int t = 0; t < 2; t++) {
            char ckpt[128];
            snprintf(ckpt, sizeof(ckpt), "%s/%s-%s.ckpt", dir, modes[mi], t ? "zmq" : "shm");
            const char *args[] = {
                "--mode", modes[mi], "--transport", t ? "zmq" : "shm", "--steps", "20", "--batch-size",
                "32",     "--lr",    "0.1",         "--checkpoint",    ckpt,      NULL};
            proc p;
            int code = train(&p, 2, args);
            ck_assert_msg(code == 0, "%s over %s: exit %d: %s", modes[mi], t ? "zmq" : "shm", code,
                          proc_output_tail(&p));
            proc_close(&p);
            read_file(ckpt, &bytes[t], &sizes[t]);
        }
        ck_assert_msg(sizes[0] == sizes[1] && memcmp(bytes[0], bytes[1], sizes[0]) == 0,
                      "%s: shared memory and ZeroMQ trained different bits", modes[mi]);
        free(bytes[0]);
        free(bytes[1]);
    }
}
END_TEST

/* Whether pid maps a segment named name (memfd:NAME). */
static bool maps_segment(pid_t pid, const char *name) {
    char path[64], line[512], needle[64];
    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    snprintf(needle, sizeof(needle), "/memfd:%s ", name);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f, "%s", path);
    bool found = false;
    while (!found && fgets(line, sizeof(line), f))
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

/* The first listening abstract socket whose name begins with prefix, from /proc/net/unix. */
/* Whether pid holds the socket of inode. */
static bool holds_socket(pid_t pid, unsigned long inode) {
    char path[64], link[64], want[48];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    snprintf(want, sizeof(want), "socket:[%lu]", inode);
    DIR *d = opendir(path);
    bool held = false;
    for (struct dirent *e; d && !held && (e = readdir(d));) {
        char fd_path[64 + sizeof(e->d_name)];
        snprintf(fd_path, sizeof(fd_path), "%s/%s", path, e->d_name);
        ssize_t n = readlink(fd_path, link, sizeof(link) - 1);
        held = n > 0 && (link[n] = '\0', strcmp(link, want) == 0);
    }
    if (d)
        closedir(d);
    return held;
}

/* The name of the abstract socket of pid's (not another test's ddpd's) that starts with
 * prefix, from /proc/net/unix. */
static bool find_abstract_socket(pid_t pid, const char *prefix, char *name, size_t size) {
    FILE *f = fopen("/proc/net/unix", "r");
    char line[512], needle[64];
    snprintf(needle, sizeof(needle), " @%s", prefix);
    bool found = false;
    while (f && !found && fgets(line, sizeof(line), f)) {
        char *at = strstr(line, needle);
        unsigned long inode = 0;
        if (at && sscanf(line, "%*s %*s %*s %*s %*s %*s %lu", &inode) == 1 && holds_socket(pid, inode)) {
            snprintf(name, size, "%s", at + 2);
            name[strcspn(name, "\n")] = '\0';
            found = true;
        }
    }
    if (f)
        fclose(f);
    return found;
}

/* Descriptors of pid that are eventfds (ZeroMQ's own signals are among them). */
static int eventfds(pid_t pid) {
    char path[64], link[320], target[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    ck_assert_msg(d, "%s: cannot read it", path);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        snprintf(link, sizeof(link), "%s/%s", path, e->d_name);
        ssize_t len = readlink(link, target, sizeof(target) - 1);
        if (len > 0) {
            target[len] = '\0';
            n += strcmp(target, "anon_inode:[eventfd]") == 0;
        }
    }
    closedir(d);
    return n;
}

/* ps on one host: a rank hands ddpd its push segment and maps ddpd's average segment; a
 * rank on DDP_TRANSPORT=zmq keeps pushing frames, in the same job. A process that is not
 * the rank it claims to be gets nothing from ddpd's socket, and the job goes on. Once the
 * job ends, ddpd maps none of its segments and holds no doorbell. */
START_TEST(test_ps_shared_memory) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    int idle_eventfds = eventfds(d.p.pid);
    proc ranks[2];
    for (int r = 0; r < 2; r++) {
        const char *argv[] = {"/usr/bin/env",
                              r ? "DDP_TRANSPORT=zmq" : "DDP_TRANSPORT=auto",
                              DDP_WORKER_PATH,
                              "--data",
                              dir,
                              "--model",
                              MODEL,
                              "--mode",
                              "ps",
                              "--batch-size",
                              "32",
                              "--epochs",
                              "100000",
                              NULL};
        rank_start(&ranks[r], &d, 2, r, "ps-shm", argv);
    }
    ck_assert_msg(proc_expect(&ranks[0], "epoch 1:", WAIT_MS, NULL, 0), "%s", proc_output_tail(&ranks[0]));
    ck_assert_msg(maps_segment(ranks[0].pid, "ddp-ps-push") && maps_segment(ranks[0].pid, "ddpd-average"),
                  "rank 0 does not share memory with ddpd");
    ck_assert_msg(!maps_segment(ranks[1].pid, "ddpd-average"), "rank 1 (DDP_TRANSPORT=zmq) maps ddpd's segment");
    ck_assert_int_eq(eventfds(d.p.pid), idle_eventfds + 1); /* the job's doorbell */

    /* rank 1 never handed over: ddpd still listens; this process claims to be rank 1 */
    char name[FD_SOCKET_NAME_BYTES];
    ck_assert_msg(find_abstract_socket(d.p.pid, "ddpd-ps-", name, sizeof(name)),
                  "no ddpd-ps- socket of ddpd's in /proc/net/unix");
    int sock = -1, fd = memfd_create("forged", MFD_CLOEXEC | MFD_ALLOW_SEALING), got = -1;
    int32_t said = -1;
    ck_assert_int_eq(fd_socket_connect(name, &sock), 0);
    int sent = fd_socket_send(sock, fd, 1); /* ddpd may have closed it already: it knows the pid is no rank's */
    ck_assert_msg(sent == 0 || sent == -EPIPE || sent == -ECONNRESET, "%d", sent);
    ck_assert_msg(fd_socket_recv(sock, clock_now_ms() + 5000, &got, &said) < 0, "ddpd handed a segment to an impostor");
    close(sock);
    close(fd);
    const char *ctl_progress = "epoch 3:"; /* and training goes on */
    ck_assert_msg(proc_expect(&ranks[0], ctl_progress, WAIT_MS, NULL, 0), "%s", proc_output_tail(&ranks[0]));
    for (int r = 0; r < 2; r++)
        proc_signal(&ranks[r], SIGTERM);
    for (int r = 0; r < 2; r++) {
        ck_assert_int_eq(proc_wait(&ranks[r], WAIT_MS), 143);
        proc_close(&ranks[r]);
    }
    uint64_t deadline = clock_now_ms() + WAIT_MS; /* ddpd ends the job when it hears the ranks left */
    while ((maps_segment(d.p.pid, "ddpd-average") || eventfds(d.p.pid) != idle_eventfds) && clock_now_ms() < deadline)
        usleep(20000);
    ck_assert_msg(!maps_segment(d.p.pid, "ddpd-average") && !maps_segment(d.p.pid, "ddp-ps-push"),
                  "ddpd still maps the ended job's segments");
    ck_assert_int_eq(eventfds(d.p.pid), idle_eventfds);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

static void read_file(const char *path, char **ret, size_t *ret_size) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f, "%s", path);
    fseek(f, 0, SEEK_END);
    *ret_size = (size_t)ftell(f);
    rewind(f);
    *ret = malloc(*ret_size + 1);
    ck_assert_uint_eq(fread(*ret, 1, *ret_size, f), *ret_size);
    fclose(f);
}

/* Stop after k steps, resume: the same bits as a run that never stopped. */
START_TEST(test_resume_is_exact) {
    static const char *const modes[] = {"ddp", "dp", "ps"};
    for (int mi = 0; mi < 3; mi++) {
        char a[128], b[128];
        snprintf(a, sizeof(a), "%s/resumed-%s.ckpt", dir, modes[mi]);
        snprintf(b, sizeof(b), "%s/straight-%s.ckpt", dir, modes[mi]);
        const char *first[] = {"--mode", modes[mi], "--steps", "11", "--batch-size", "32", "--checkpoint", a, NULL};
        const char *second[] = {"--mode", modes[mi],      "--steps", "27",       "--batch-size",
                                "32",     "--checkpoint", a,         "--resume", NULL};
        const char *straight[] = {"--mode", modes[mi], "--steps", "27", "--batch-size", "32", "--checkpoint", b, NULL};
        proc p;
        ck_assert_int_eq(train(&p, 2, first), 0);
        proc_close(&p);
        int code = train(&p, 2, second);
        ck_assert_msg(code == 0, "resume: %s", proc_output_tail(&p));
        proc_close(&p);
        ck_assert_int_eq(train(&p, 2, straight), 0);
        proc_close(&p);
        char *x, *y;
        size_t nx, ny;
        read_file(a, &x, &nx);
        read_file(b, &y, &ny);
        ck_assert_msg(nx == ny && memcmp(x, y, nx) == 0, "%s: the resumed run's checkpoint differs", modes[mi]);
        free(x);
        free(y);
    }
}
END_TEST

static void assert_same_file(const char *a, const char *b, const char *what) {
    char *x, *y;
    size_t nx, ny;
    read_file(a, &x, &nx);
    read_file(b, &y, &ny);
    ck_assert_msg(nx == ny && memcmp(x, y, nx) == 0, "%s: %s and %s differ", what, a, b);
    free(x);
    free(y);
}

/* Model parallel (--devices): the layers split over two CPU backends train exactly what one
 * backend trains, in every mode, and a split run resumes an unsplit one's checkpoint. */
START_TEST(test_model_parallel) {
    static const char *const modes[] = {"ddp", "dp", "ps"};
    for (int mi = 0; mi < 3; mi++) {
        char a[128], b[128];
        snprintf(a, sizeof(a), "%s/whole-%s.ckpt", dir, modes[mi]);
        snprintf(b, sizeof(b), "%s/split-%s.ckpt", dir, modes[mi]);
        const char *whole[] = {"--mode", modes[mi], "--steps", "15", "--batch-size", "32", "--checkpoint", a, NULL};
        const char *split[] = {"--mode", modes[mi],   "--steps", "15", "--batch-size", "32", "--checkpoint",
                               b,        "--devices", "cpu,cpu", NULL};
        proc p;
        ck_assert_int_eq(train(&p, 2, whole), 0);
        proc_close(&p);
        int code = train(&p, 2, split);
        ck_assert_msg(code == 0, "%s --devices: %s", modes[mi], proc_output_tail(&p));
        proc_close(&p);
        assert_same_file(a, b, modes[mi]);
    }
    char c[128], a[128];
    snprintf(c, sizeof(c), "%s/half-then-split.ckpt", dir);
    snprintf(a, sizeof(a), "%s/whole-ddp.ckpt", dir);
    const char *first[] = {"--steps", "7", "--batch-size", "32", "--checkpoint", c, NULL};
    const char *rest[] = {"--steps", "15",       "--batch-size", "32",      "--checkpoint",
                          c,         "--resume", "--devices",    "cpu,cpu", NULL};
    proc p;
    ck_assert_int_eq(train(&p, 2, first), 0);
    proc_close(&p);
    int code = train(&p, 2, rest);
    ck_assert_msg(code == 0, "resume with --devices: %s", proc_output_tail(&p));
    proc_close(&p);
    assert_same_file(a, c, "resumed split");
}
END_TEST

static void copy_file(const char *from, const char *to, long truncate_to) {
    char *data;
    size_t n;
    read_file(from, &data, &n);
    FILE *f = fopen(to, "wb");
    ck_assert(f);
    fwrite(data, 1, truncate_to >= 0 && (size_t)truncate_to < n ? (size_t)truncate_to : n, f);
    fclose(f);
    free(data);
}

/* Every bad input: a clear error, a non-zero exit. */
START_TEST(test_bad_inputs) {
    char bad[128], path[256], from[256];
    snprintf(bad, sizeof(bad), "%s/bad", dir);
    mkdir(bad, 0755);
    struct {
        const char *case_name;
        const char *args[12];
        int n;
        const char *expected;
    } cases[] = {
        {"batch", {"--batch-size", "30"}, 4, "--batch-size 30 does not split evenly over 4 workers"},
        {"model", {"--model", "resnet50"}, 1, "unknown model 'resnet50'"},
        {"mode", {"--mode", "allreduce"}, 1, "--mode: 'allreduce' is not one of ddp dp ps"},
        {"resume", {"--resume"}, 1, "--resume needs --checkpoint PATH"},
        {"classes", {"--model", "64-16-7"}, 1, "has 7 outputs but"},
        {"inputs", {"--model", "784-10"}, 1, "takes 784 inputs but the images in"},
        {"data", {"--data", "/nonexistent-dir"}, 1, "/nonexistent-dir"},
        {"device", {"--device", "tpu"}, 1, "--device 'tpu': use cpu, cuda or cuda:K"},
        /* no such GPU, whether this build has CUDA and this machine a GPU or not */
        {"gpu", {"--device", "cuda:1000"}, 1, "--device cuda:1000: "},
        {"transport", {"--transport", "nccl"}, 1, "--transport nccl: needs --device cuda"},
        {"transport mode", {"--transport", "nccl", "--mode", "ps"}, 1, "--transport nccl: only --mode ddp"},
        {"devices", {"--devices", "0"}, 1, "--devices '0': name two devices"},
        {"devices nccl", {"--devices", "cpu,cpu", "--transport", "nccl"}, 1, "--transport nccl: one device per rank"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        proc p;
        int code = train(&p, cases[i].n, cases[i].args);
        ck_assert_msg(code != 0, "%s: exit 0", cases[i].case_name);
        ck_assert_msg(strstr(proc_output(&p), cases[i].expected), "%s: expected '%s' in: %s", cases[i].case_name,
                      cases[i].expected, proc_output_tail(&p));
        proc_close(&p);
    }

    /* Broken IDX files, each in an otherwise good directory. */
    const char *names[] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                           "t10k-labels-idx1-ubyte.gz"};
    struct {
        const char *what;
        int file;
        long keep; /* bytes of the gzip file to keep, -1 all */
        const char *expected;
    } broken[] = {
        {"truncated images", 0, 300, "train-images-idx3-ubyte.gz"},
        {"labels of another count", 1, -2, "train-labels-idx1-ubyte.gz"},
        {"wrong magic", 2, -3, "t10k-images-idx3-ubyte.gz"},
    };
    for (size_t i = 0; i < sizeof(broken) / sizeof(broken[0]); i++) {
        for (int f = 0; f < 4; f++) {
            snprintf(from, sizeof(from), "%s/%s", dir, names[f]);
            snprintf(path, sizeof(path), "%s/%s", bad, names[f]);
            copy_file(from, path, f == broken[i].file && broken[i].keep >= 0 ? broken[i].keep : -1);
        }
        snprintf(path, sizeof(path), "%s/%s", bad, names[broken[i].file]);
        if (broken[i].keep == -2) { /* a label file that promises 10 items */
            gzFile g = gzopen(path, "wb");
            unsigned char h[8] = {0, 0, 8, 1, 0, 0, 0, 10}, labels[10] = {0};
            gzwrite(g, h, 8);
            gzwrite(g, labels, 10);
            gzclose(g);
        } else if (broken[i].keep == -3) {
            gzFile g = gzopen(path, "wb");
            unsigned char h[16] = {0, 0, 9, 9};
            gzwrite(g, h, 16);
            gzclose(g);
        }
        const char *args[] = {"--data", bad, NULL};
        proc p;
        int code = train(&p, 1, args);
        ck_assert_msg(code != 0, "%s: exit 0", broken[i].what);
        ck_assert_msg(strstr(proc_output(&p), broken[i].expected), "%s: expected '%s' in: %s", broken[i].what,
                      broken[i].expected, proc_output_tail(&p));
        proc_close(&p);
    }

    /* A checkpoint that is not one, and one that was cut short. */
    snprintf(path, sizeof(path), "%s/garbage.ckpt", dir);
    FILE *f = fopen(path, "wb");
    fputs("this is not a checkpoint at all, but it is long enough to have a header of some kind......", f);
    fclose(f);
    const char *garbage[] = {"--checkpoint", path, "--resume", "--steps", "2", "--batch-size", "32", NULL};
    proc p;
    ck_assert_int_ne(train(&p, 2, garbage), 0);
    ck_assert_msg(strstr(proc_output(&p), "not a ddp-worker checkpoint"), "%s", proc_output_tail(&p));
    proc_close(&p);
    char good[256];
    snprintf(good, sizeof(good), "%s/good.ckpt", dir);
    const char *make[] = {"--checkpoint", good, "--steps", "2", "--batch-size", "32", NULL};
    ck_assert_int_eq(train(&p, 1, make), 0);
    proc_close(&p);
    copy_file(good, path, 2000);
    ck_assert_int_ne(train(&p, 1, garbage), 0);
    ck_assert_msg(strstr(proc_output(&p), "truncated"), "%s", proc_output_tail(&p));
    proc_close(&p);
    /* one flipped bit: the checksum notices */
    char *data;
    size_t n;
    read_file(good, &data, &n);
    data[n / 2] ^= 1;
    f = fopen(path, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
    free(data);
    ck_assert_int_ne(train(&p, 1, garbage), 0);
    ck_assert_msg(strstr(proc_output(&p), "checksum mismatch"), "%s", proc_output_tail(&p));
    proc_close(&p);
}
END_TEST

/* SIGTERM to ddp-run while training: every rank stops between steps, rank 0 writes the
 * checkpoint, and every process ends cleanly. */
START_TEST(test_sigterm_keeps_the_checkpoint) {
    char ckpt[128];
    snprintf(ckpt, sizeof(ckpt), "%s/stopped.ckpt", dir);
    char n_text[] = "2";
    const char *argv[] = {DDP_RUN_PATH,   "-n", n_text,     "--",     DDP_WORKER_PATH, "--data", dir, "--model", MODEL,
                          "--batch-size", "32", "--epochs", "100000", "--checkpoint",  ckpt,     NULL};
    proc p;
    proc_start(&p, argv, NULL);
    ck_assert_msg(proc_expect(&p, "epoch 2:", WAIT_MS, NULL, 0), "%s", proc_output_tail(&p));
    proc_signal(&p, SIGTERM);
    ck_assert_int_eq(proc_wait(&p, WAIT_MS), 143);
    char line[256];
    ck_assert_msg(proc_expect(&p, "stopped by a signal at step", 0, line, sizeof(line)), "%s", proc_output_tail(&p));
    unsigned long long step = strtoull(strstr(line, "at step ") + 8, NULL, 10);
    ck_assert_msg(!strstr(proc_output(&p), "error"), "%s", proc_output_tail(&p));
    checkpoint_info expect = {.model = MODEL, .n_params = 64 * 16 + 16 + 16 * 10 + 10}, info;
    float *params = malloc(expect.n_params * sizeof(float));
    char err[512];
    ck_assert_msg(checkpoint_read(ckpt, &expect, &info, params, NULL, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(info.step, step);
    free(params);
    proc_close(&p);
}
END_TEST

/* A rank killed mid-training: ddp-run --max-restarts starts the job again, it re-forms,
 * every rank resumes from the last checkpoint, and the run ends where it would have. */
START_TEST(test_restart_resumes) {
    char ckpt[128];
    snprintf(ckpt, sizeof(ckpt), "%s/restart.ckpt", dir);
    const char *argv[] = {
        DDP_RUN_PATH,   "-n", "2",        "--verbose", "--max-restarts", "1",  "--",       DDP_WORKER_PATH,
        "--data",       dir,  "--model",  MODEL,       "--batch-size",   "32", "--epochs", "150",
        "--checkpoint", ckpt, "--resume", NULL};
    proc p;
    proc_start(&p, argv, NULL);
    char line[256];
    ck_assert_msg(proc_expect(&p, "rank 1 is pid ", WAIT_MS, line, sizeof(line)), "%s", proc_output_tail(&p));
    int pid = atoi(strstr(line, "rank 1 is pid ") + 14);
    ck_assert_msg(proc_expect(&p, "epoch 2:", WAIT_MS, NULL, 0), "%s", proc_output_tail(&p));
    ck_assert_int_eq(kill(pid, SIGKILL), 0);
    ck_assert_msg(proc_expect(&p, "starting it again (1 of 1 restarts)", WAIT_MS, NULL, 0), "%s", proc_output_tail(&p));
    ck_assert_msg(proc_expect(&p, "resumed from", WAIT_MS, NULL, 0), "%s", proc_output_tail(&p));
    int code = proc_wait(&p, WAIT_MS);
    ck_assert_msg(code == 0, "exit %d: %s", code, proc_output_tail(&p));
    checkpoint_info expect = {.model = MODEL, .n_params = 64 * 16 + 16 + 16 * 10 + 10}, info;
    float *params = malloc(expect.n_params * sizeof(float));
    char err[512];
    ck_assert_msg(checkpoint_read(ckpt, &expect, &info, params, NULL, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(info.step, 150 * 16);
    free(params);
    proc_close(&p);
}
END_TEST

/* A rank that cannot go on (here rank 0 cannot write its checkpoint: it refuses at
 * start-up, a usage error) ends the job for all: the others fail at once naming it,
 * without a launcher to stop them. */
START_TEST(test_one_rank_gives_up) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    proc w[2];
    const char *argv[] = {DDP_WORKER_PATH,
                          "--data",
                          dir,
                          "--model",
                          MODEL,
                          "--batch-size",
                          "32",
                          "--epochs",
                          "3",
                          "--checkpoint",
                          "/nonexistent-dir/x.ckpt",
                          NULL};
    for (int r = 0; r < 2; r++)
        rank_start(&w[r], &d, 2, r, NULL, argv);
    char line[512];
    ck_assert_msg(proc_expect(&w[1], "gave up", WAIT_MS, line, sizeof(line)), "%s", proc_output_tail(&w[1]));
    ck_assert_msg(strstr(line, "rank 0 (pid ") && strstr(line, "/nonexistent-dir/x.ckpt"), "%s", line);
    ck_assert_int_eq(proc_wait(&w[0], WAIT_MS), 2);
    ck_assert_int_eq(proc_wait(&w[1], WAIT_MS), 1);
    for (int r = 0; r < 2; r++)
        proc_close(&w[r]);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

/* A metrics line's compute is its phases: forward, backward and the optimizer, each
 * counted (by an epoch's end, every one has taken time), none more than the whole. */
static void assert_phases(const cJSON *j, const char *line) {
    bool epoch = !strcmp(cJSON_GetObjectItem(j, "type")->valuestring, "epoch");
    double compute = cJSON_GetObjectItem(j, "compute_s")->valuedouble, sum = 0;
    static const char *const phases[] = {"forward_s", "backward_s", "optimizer_s"};
    for (size_t k = 0; k < sizeof(phases) / sizeof(phases[0]); k++) {
        const cJSON *x = cJSON_GetObjectItem(j, phases[k]);
        ck_assert_msg(cJSON_IsNumber(x), "%s missing in %s", phases[k], line);
        ck_assert_msg(epoch ? x->valuedouble > 0 : x->valuedouble >= 0, "%s is %g: %s", phases[k], x->valuedouble,
                      line);
        sum += x->valuedouble;
    }
    ck_assert_msg(fabs(sum - compute) <= 1e-6 * (1 + compute), "the phases sum to %g, compute_s is %g: %s", sum,
                  compute, line);
}

/* --metrics with %r: every rank writes JSON lines per step and per epoch. */
START_TEST(test_metrics) {
    char pattern[128];
    snprintf(pattern, sizeof(pattern), "%s/metrics-%%r.jsonl", dir);
    const char *args[] = {"--metrics", pattern, "--epochs", "1", "--batch-size", "32", NULL};
    proc p;
    int code = train(&p, 2, args);
    ck_assert_msg(code == 0, "%s", proc_output_tail(&p));
    ck_assert_msg(strstr(proc_output(&p), "test accuracy"), "%s", proc_output_tail(&p));
    proc_close(&p);
    for (int r = 0; r < 2; r++) {
        char path[160], *text;
        size_t n;
        snprintf(path, sizeof(path), "%s/metrics-%d.jsonl", dir, r);
        read_file(path, &text, &n);
        text[n] = '\0';
        int steps = 0, epochs = 0;
        for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
            cJSON *j = cJSON_Parse(line);
            ck_assert_msg(j, "not JSON: %s", line);
            const char *type = cJSON_GetObjectItem(j, "type")->valuestring;
            steps += !strcmp(type, "step");
            epochs += !strcmp(type, "epoch");
            ck_assert_int_eq(cJSON_GetObjectItem(j, "rank")->valueint, r);
            static const char *const keys[] = {"loss",       "samples_per_s",  "compute_s",   "comm_s",       "wait_s",
                                               "bytes_sent", "bytes_received", "peak_rss_kb", "device_memory"};
            for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
                ck_assert_msg(cJSON_GetObjectItem(j, keys[k]), "%s missing in %s", keys[k], line);
            if (!strcmp(type, "epoch"))
                ck_assert_msg(cJSON_GetObjectItem(j, "test_accuracy"), "%s", line);
            assert_phases(j, line);
            cJSON_Delete(j);
        }
        ck_assert_int_eq(steps, 16); /* 512 samples, batch 32 */
        ck_assert_int_eq(epochs, 1);
        free(text);
    }
    /* Without %r only rank 0 writes, and the ranks stay in step all the same; dp and ps
     * count their phases too. */
    static const char *const modes[] = {"ddp", "dp", "ps"};
    for (size_t k = 0; k < sizeof(modes) / sizeof(modes[0]); k++) {
        char only[128];
        snprintf(only, sizeof(only), "%s/rank0-only-%s.jsonl", dir, modes[k]);
        const char *rank0[] = {"--metrics", only, "--epochs", "2", "--batch-size", "32", "--mode", modes[k], NULL};
        code = train(&p, 2, rank0);
        ck_assert_msg(code == 0, "%s: %s", modes[k], proc_output_tail(&p));
        proc_close(&p);
        char *text;
        size_t n;
        read_file(only, &text, &n);
        text[n] = '\0';
        while (n > 0 && text[n - 1] == '\n')
            text[--n] = '\0';
        char *last = strrchr(text, '\n'); /* the last line: the second epoch's */
        last = last ? last + 1 : text;
        cJSON *j = cJSON_Parse(last);
        ck_assert_msg(j && !strcmp(cJSON_GetObjectItem(j, "mode")->valuestring, modes[k]), "%s: %s", modes[k], last);
        assert_phases(j, last);
        cJSON_Delete(j);
        free(text);
    }
}
END_TEST

/* The main job's model on the real data learns, where Debian's dataset is installed. */
START_TEST(test_fashion_mnist) {
    ck_assert_msg(access(FASHION_MNIST, R_OK) == 0, "%s is not installed (Debian's dataset-fashion-mnist)",
                  FASHION_MNIST);
    const char *argv[] = {DDP_RUN_PATH, "-n", "2", "--", DDP_WORKER_PATH, "--model", "linear", "--epochs", "1", NULL};
    proc p;
    proc_start(&p, argv, NULL);
    ck_assert_int_eq(proc_wait(&p, WAIT_MS), 0);
    char line[256];
    ck_assert_msg(proc_expect(&p, "test accuracy", 0, line, sizeof(line)), "%s", proc_output_tail(&p));
    double acc = atof(strstr(line, "test accuracy") + 14);
    ck_assert_msg(acc > 0.75, "accuracy %.4f after an epoch of linear: %s", acc, line);
    proc_close(&p);
}
END_TEST

START_TEST(test_toy) {
    char metrics[128];
    snprintf(metrics, sizeof(metrics), "%s/toy.jsonl", dir);
    const char *argv[] = {DDP_RUN_PATH, "-n",       "2", "--",        DDP_WORKER_PATH, "--model",
                          "toy",        "--epochs", "2", "--metrics", metrics,         NULL};
    proc p;
    proc_start(&p, argv, NULL);
    ck_assert_int_eq(proc_wait(&p, WAIT_MS), 0);
    ck_assert_msg(proc_expect(&p, "epoch 2: loss", 0, NULL, 0) && strstr(proc_output(&p), "test loss"), "%s",
                  proc_output_tail(&p));
    proc_close(&p);
    char *text;
    size_t n;
    read_file(metrics, &text, &n);
    text[n] = '\0';
    ck_assert_msg(strstr(text, "\"test_loss\":"), "the toy model's test loss is not in the metrics");
    free(text);
}
END_TEST

/* One worker's banner names the BLAS kernels it trains with: OpenBLAS's own choice for a
 * CPU it knows, the CPU's best by its features where OpenBLAS fell back to its generic
 * ones (blas_kernels.h), and always what OPENBLAS_CORETYPE names when the user sets it. */
START_TEST(test_blas_kernels) {
    /* This test runs the same library on the same CPU: its choice is the worker's first one. */
    const char *chosen = blas_kernels_in_use();
    const char *better = getenv("OPENBLAS_CORETYPE") ? NULL : blas_kernels_better(chosen, blas_cpu_features());
    const char *argv[] = {DDP_RUN_PATH, "-n",      "1", "--", DDP_WORKER_PATH, "--data", dir, "--model",
                          MODEL,        "--steps", "2", NULL};
    const char *generic[] = {"OPENBLAS_CORETYPE=Prescott", NULL};
    /* an OpenBLAS built for one target (not DYNAMIC_ARCH, as Debian's is) has no choice to make */
    int runs = strstr(openblas_get_config(), "DYNAMIC_ARCH") ? 2 : 1;
    for (int told = 0; told < runs; told++) {
        char expect[96];
        snprintf(expect, sizeof(expect), "OpenBLAS %s kernels", told ? "Prescott" : better ? better : chosen);
        proc p;
        proc_start(&p, argv, told ? generic : NULL);
        ck_assert_msg(proc_wait(&p, WAIT_MS) == 0, "%s", proc_output_tail(&p));
        ck_assert_msg(proc_expect(&p, expect, 0, NULL, 0), "expected \"%s\" (OpenBLAS chose %s here): %s", expect,
                      chosen, proc_output_tail(&p));
        proc_close(&p);
    }
}
END_TEST

static TCase *add_case(Suite *s, TCase *tc) {
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, CASE_TIMEOUT_S);
    suite_add_tcase(s, tc);
    return tc;
}

int main(int argc, char **argv) {
    /* The real dataset's case is CTest's test of its own: skipped, visibly, without it. */
    if (check_selected(argc, argv, "fashion-mnist") && access(FASHION_MNIST, R_OK) != 0)
        return check_skip("fashion-mnist", FASHION_MNIST " is not installed (Debian's dataset-fashion-mnist)");
    Suite *s = suite_create("training");
    /* Cases CTest runs side by side. */
    tcase_add_test(add_case(s, tcase_create("equivalence")), test_equivalence);
    tcase_add_test(add_case(s, tcase_create("resume")), test_resume_is_exact);
    tcase_add_test(add_case(s, tcase_create("transports")), test_transports);
    tcase_add_test(add_case(s, tcase_create("ps-shared-memory")), test_ps_shared_memory);
    tcase_add_test(add_case(s, tcase_create("model-parallel")), test_model_parallel);
    TCase *errors = add_case(s, tcase_create("errors"));
    tcase_add_test(errors, test_bad_inputs);
    tcase_add_test(errors, test_one_rank_gives_up);
    TCase *signals = add_case(s, tcase_create("signals"));
    tcase_add_test(signals, test_sigterm_keeps_the_checkpoint);
    tcase_add_test(signals, test_restart_resumes);
    TCase *output = add_case(s, tcase_create("output"));
    tcase_add_test(output, test_metrics);
    tcase_add_test(output, test_toy);
    tcase_add_test(output, test_blas_kernels);
    tcase_add_test(add_case(s, tcase_create("fashion-mnist")), test_fashion_mnist);
    return check_main(s, argc, argv);
}
