/* ddp-run with real ranks on loopback: ranks and their prefixes, the first failure, signals
 * forwarded, a given coordinator, programs that cannot run, usage errors. */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/check_main.h"
#include "tests/integration/harness.h"

#define WAIT_MS 20000 /* generous: a failure is a missing line, never a slow one */

/* Runs ddp-run with args (NULL-terminated) and env, to its end; returns its exit code. */
static int run_launcher(proc *p, const char *const *args, const char *const *env) {
    const char *argv[32] = {DDP_RUN_PATH};
    size_t n = 1;
    for (size_t i = 0; args[i] && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    proc_start(p, argv, env);
    return proc_wait(p, WAIT_MS);
}

/* Runs ddp-run to its end and checks its exit code. */
static void run_expecting(proc *p, const char *const *args, const char *const *env, int expected_code) {
    int code = run_launcher(p, args, env);
    ck_assert_msg(code == expected_code, "ddp-run exited %d, not %d:\n%s", code, expected_code, proc_output_tail(p));
}

static void assert_output_has(proc *p, const char *needle) {
    ck_assert_msg(strstr(proc_output(p), needle), "expected '%s' in:\n%s", needle, proc_output_tail(p));
}

/* Finds "<before>%d" in the output, e.g. the pid after "[rank 1] pid ". -1 if absent. */
static int output_int_after(proc *p, const char *before) {
    const char *at = strstr(proc_output(p), before);
    return at ? atoi(at + strlen(before)) : -1;
}

/* ddp-run reaps what it started: once it has exited, none of those pids exists. */
static void assert_gone(int pid) {
    ck_assert_int_gt(pid, 0);
    ck_assert_msg(kill(pid, 0) < 0 && errno == ESRCH, "pid %d is still there", pid);
}

/* Waits for a number written to path (a pid a rank wrote). */
static int read_number_file(const char *path) {
    for (int i = 0; i < WAIT_MS / 20; i++) {
        FILE *f = fopen(path, "r");
        int n = 0;
        bool got = f && fscanf(f, "%d", &n) == 1 && n > 0;
        if (f)
            fclose(f);
        if (got)
            return n;
        usleep(20000);
    }
    ck_abort_msg("nothing in %s after %d ms", path, WAIT_MS);
    return -1;
}

/* Makes dir (a mkdtemp template) for a test's files, env "DIR=dir" for the ranks' scripts
 * and, unless fifo is NULL, the FIFO dir/go into fifo: a reader's "go". */
static void scratch_dir(char *dir, char *env, size_t env_size, char *fifo, size_t fifo_size) {
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(env, env_size, "DIR=%s", dir);
    if (fifo) {
        snprintf(fifo, fifo_size, "%s/go", dir);
        ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    }
}

/* Whether pid runs: not gone, and not a zombie (a process ddp-run left behind may end up
 * with a parent that does not reap it). */
static bool process_runs(int pid) {
    char path[64], stat[256] = "";
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(stat, 1, sizeof(stat) - 1, f);
    fclose(f);
    stat[n] = '\0';
    const char *state = strrchr(stat, ')');
    return state && state[1] == ' ' && state[2] != 'Z' && state[2] != 'X';
}

START_TEST(test_four_ranks) {
    /* A bare "member" is not on PATH: ddp-run finds it in its own directory. */
    const char *args[] = {"-n", "4", "--", "member", "--barriers", "3", NULL};
    proc p;
    run_expecting(&p, args, NULL, 0);
    for (int r = 0; r < 4; r++) {
        char line[64];
        snprintf(line, sizeof(line), "[rank %d] joined rank %d world 4", r, r);
        assert_output_has(&p, line);
        snprintf(line, sizeof(line), "[rank %d] barrier 2 ok", r);
        assert_output_has(&p, line);
        snprintf(line, sizeof(line), "[rank %d] finalized\n", r);
        assert_output_has(&p, line);
    }
    proc_close(&p);
}
END_TEST

START_TEST(test_many_ranks) {
    /* Two pipes a rank: more than the usual 1024 descriptors, and each rank its own prefix. */
    const char *args[] = {"-n", "600", "--", "printenv", "RANK", NULL};
    proc p;
    run_expecting(&p, args, NULL, 0);
    for (int r = 0; r < 600; r += 37) {
        char line[32];
        snprintf(line, sizeof(line), "[rank %d] %d\n", r, r);
        assert_output_has(&p, line);
    }
    assert_output_has(&p, "[rank 599] 599\n");
    proc_close(&p);
}
END_TEST

START_TEST(test_first_failure_stops_the_rest) {
    /* Rank 2 fails at once; the others wait to form the job until told to stop. A grace
     * period longer than WAIT_MS shows that SIGTERM, not SIGKILL, ended them. */
    const char *script = "echo \"pid $$\"; if [ \"$RANK\" = 2 ]; then exit 3; fi; exec \"$0\" --barriers 1000";
    const char *args[] = {"-n", "4", "--grace-ms", "60000", "--", "sh", "-c", script, MEMBER_PATH, NULL};
    proc p;
    run_expecting(&p, args, NULL, 3);
    char expected[64];
    int pid2 = output_int_after(&p, "[rank 2] pid ");
    snprintf(expected, sizeof(expected), "rank 2 (pid %d) exited with code 3", pid2);
    assert_output_has(&p, expected);
    for (int r = 0; r < 4; r++) {
        char prefix[32];
        snprintf(prefix, sizeof(prefix), "[rank %d] pid ", r);
        int pid = output_int_after(&p, prefix);
        if (pid > 0) /* a rank stopped before its shell said anything is gone all the same */
            assert_gone(pid);
    }
    ck_assert_msg(!strstr(proc_output(&p), "SIGKILL"), "%s", proc_output_tail(&p));
    proc_close(&p);
}
END_TEST

/* Whether pid has exited (a zombie not yet reaped, or gone). */
static bool process_ended(int pid) {
    return !process_runs(pid);
}

/* Two ranks end while ddp-run is held (SIGSTOP), so that it reaps both in one round: rank
 * 0 fails with code 1, rank 1 is killed by a signal (a crash, whose peers fail after it).
 * Both are said, and ddp-run's code is the signal's, not the code of the rank it reaped
 * first (that one was said only with -v). */
START_TEST(test_crash_reaped_with_another) {
    char dir[] = "/tmp/ddp-run-crash-XXXXXX", env_dir[64], path[96];
    scratch_dir(dir, env_dir, sizeof(env_dir), NULL, 0);
    const char *script = "echo $$ > \"$DIR/pid.$RANK\"; while [ ! -e \"$DIR/go\" ]; do sleep 0.01; done; "
                         "if [ \"$RANK\" = 1 ]; then kill -USR1 $$; sleep 5; fi; exit 1";
    const char *argv[] = {DDP_RUN_PATH, "-n", "2", "--", "sh", "-c", script, NULL};
    const char *env[] = {env_dir, NULL};
    proc p;
    proc_start(&p, argv, env);
    int pids[2];
    for (int r = 0; r < 2; r++) {
        snprintf(path, sizeof(path), "%s/pid.%d", dir, r);
        pids[r] = read_number_file(path);
    }
    proc_signal(&p, SIGSTOP);
    snprintf(path, sizeof(path), "%s/go", dir);
    FILE *go = fopen(path, "w");
    ck_assert_ptr_nonnull(go);
    fclose(go);
    for (int i = 0; i < WAIT_MS / 10 && !(process_ended(pids[0]) && process_ended(pids[1])); i++)
        usleep(10000);
    proc_signal(&p, SIGCONT);
    int code = proc_wait(&p, WAIT_MS);
    ck_assert_msg(code == 128 + SIGUSR1, "ddp-run exited %d:\n%s", code, proc_output_tail(&p));
    char said[96];
    snprintf(said, sizeof(said), "rank 1 (pid %d) was killed by signal %d", pids[1], SIGUSR1);
    assert_output_has(&p, said);
    snprintf(said, sizeof(said), "rank 0 (pid %d) exited with code 1", pids[0]);
    assert_output_has(&p, said);
    proc_close(&p);
}
END_TEST

/* After a rank failed, the others are stopping (SIGTERM, a long grace period): the user's
 * first Ctrl-C reaches them too, within that grace, rather than killing them at once (it
 * was taken as the second signal); rank 0 finishes what its handler does. */
START_TEST(test_first_signal_after_a_failure) {
    char dir[] = "/tmp/ddp-run-grace-XXXXXX", env_dir[64], path[96];
    scratch_dir(dir, env_dir, sizeof(env_dir), NULL, 0);
    const char *script = "if [ \"$RANK\" = 1 ]; then while [ ! -e \"$DIR/ready\" ]; do sleep 0.01; done; exit 1; fi; "
                         "trap 'i=0; while [ ! -e \"$DIR/go\" ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done; "
                         "touch \"$DIR/saved\"; exit 0' TERM INT; touch \"$DIR/ready\"; while :; do sleep 0.05; done";
    const char *argv[] = {DDP_RUN_PATH, "-n", "2", "--grace-ms", "15000", "--", "sh", "-c", script, NULL};
    const char *env[] = {env_dir, NULL};
    proc p;
    proc_start(&p, argv, env);
    ck_assert_msg(proc_expect(&p, "exited with code 1; stopping the other ranks", WAIT_MS, NULL, 0), "%s",
                  proc_output_tail(&p));
    proc_signal(&p, SIGINT); /* while rank 0's handler runs: it waits for the file "go" */
    ck_assert_msg(
        proc_expect(&p, "received SIGINT while the ranks stop after a failure; forwarding it", WAIT_MS, NULL, 0), "%s",
        proc_output_tail(&p));
    snprintf(path, sizeof(path), "%s/go", dir);
    FILE *go = fopen(path, "w");
    ck_assert_ptr_nonnull(go);
    fclose(go);
    int code = proc_wait(&p, WAIT_MS);
    ck_assert_msg(code == 1, "ddp-run exited %d:\n%s", code, proc_output_tail(&p));
    ck_assert_msg(!strstr(proc_output(&p), "killing the ranks now"), "%s", proc_output_tail(&p));
    snprintf(path, sizeof(path), "%s/saved", dir);
    ck_assert_msg(access(path, F_OK) == 0, "rank 0's handler did not finish:\n%s", proc_output_tail(&p));
    proc_close(&p);
}
END_TEST

START_TEST(test_signal_forwarded) {
    static const int signals[] = {SIGTERM, SIGINT};
    static const int codes[] = {143, 130};
    const char *args[] = {"-n", "3", "--", MEMBER_PATH, "--barriers", "2", "--hang-at", "1", NULL};
    const char *argv[16] = {DDP_RUN_PATH};
    for (size_t i = 0; args[i]; i++)
        argv[i + 1] = args[i];
    proc p;
    proc_start(&p, argv, NULL);
    for (int r = 0; r < 3; r++)
        ck_assert_msg(proc_expect(&p, "barrier 0 ok", WAIT_MS, NULL, 0), "%s", proc_output_tail(&p));
    int pids[3];
    for (int r = 0; r < 3; r++) {
        char before[64];
        snprintf(before, sizeof(before), "[rank %d] joined rank %d world 3 pid ", r, r);
        pids[r] = output_int_after(&p, before);
        ck_assert_msg(pids[r] > 0, "no pid for rank %d in:\n%s", r, proc_output_tail(&p));
    }
    proc_signal(&p, signals[_i]);
    ck_assert_msg(proc_wait(&p, WAIT_MS) == codes[_i], "%s", proc_output_tail(&p));
    assert_output_has(&p, signals[_i] == SIGTERM ? "received SIGTERM" : "received SIGINT");
    for (int r = 0; r < 3; r++)
        assert_gone(pids[r]);
    proc_close(&p);
}
END_TEST

/* A crowd on two cores: ranks starting together starve one another (and ddpd) past a
 * short liveness window; they must be held stalled, never declared dead, and the job must
 * form and finish (issue 15: 128 ranks failed one run in two, 256 every time). */
START_TEST(test_crowd_is_not_dead) {
#ifdef DDP_SANITIZED
    const char *n = "64"; /* each process carries the sanitizers' memory */
#else
    const char *n = "128";
#endif
    const char *argv[] = {DDP_RUN_PATH, "-n", n, "--", MEMBER_PATH, "--barriers", "3", NULL};
    const char *env[] = {"DDPD_HEARTBEAT_MS=100", NULL}; /* the private ddpd's window: 300 ms */
    proc p;
    proc_start(&p, argv, env);
    ck_assert_msg(proc_wait(&p, WAIT_MS) == 0, "%s", proc_output_tail(&p));
    ck_assert_msg(!strstr(proc_output(&p), " died") && !strstr(proc_output(&p), "lost the coordinator"), "%s",
                  proc_output_tail(&p));
    int finalized = 0;
    for (const char *s = proc_output(&p); (s = strstr(s, "] finalized")); s++)
        finalized++;
    ck_assert_int_eq(finalized, atoi(n));
    proc_close(&p);
}
END_TEST

START_TEST(test_sigkill_after_grace) {
    /* Ranks that ignore SIGTERM (as a busy trainer might) are killed once the grace ends: a
     * stop that did not happen as asked (what they had not saved is lost), exit 137. */
    const char *script = "trap '' TERM; exec \"$0\" --barriers 2 --hang-at 0";
    const char *argv[] = {DDP_RUN_PATH, "-n", "2", "--grace-ms", "200", "--", "sh", "-c", script, MEMBER_PATH, NULL};
    proc p;
    proc_start(&p, argv, NULL);
    int pids[2];
    for (int r = 0; r < 2; r++)
        ck_assert_msg(proc_expect(&p, "joined rank", WAIT_MS, NULL, 0), "%s", proc_output_tail(&p));
    for (int r = 0; r < 2; r++) {
        char before[64];
        snprintf(before, sizeof(before), "[rank %d] joined rank %d world 2 pid ", r, r);
        pids[r] = output_int_after(&p, before);
    }
    proc_signal(&p, SIGTERM);
    ck_assert_msg(proc_wait(&p, WAIT_MS) == 128 + SIGKILL, "%s", proc_output_tail(&p));
    assert_output_has(&p, "2 ranks still running 200 ms after SIGTERM; sending SIGKILL");
    assert_output_has(&p, "did not stop within 200 ms of SIGTERM and was killed: what it had not saved is lost");
    for (int r = 0; r < 2; r++)
        assert_gone(pids[r]);
    proc_close(&p);
}
END_TEST

/* Ranks that fail when told to stop (exit 1: ddp-worker whose last checkpoint could not be
 * written) are news: said as errors, and ddp-run exits with their code, not 143. */
START_TEST(test_failed_stop_is_news) {
    const char *script = "trap 'exit 1' TERM; echo ready; while :; do sleep 0.05; done";
    const char *argv[] = {DDP_RUN_PATH, "-n", "2", "--", "sh", "-c", script, NULL};
    proc p;
    proc_start(&p, argv, NULL);
    for (int r = 0; r < 2; r++) /* in either order */
        ck_assert_msg(proc_expect(&p, "] ready", WAIT_MS, NULL, 0), "%s", proc_output_tail(&p));
    proc_signal(&p, SIGTERM);
    ck_assert_msg(proc_wait(&p, WAIT_MS) == 1, "%s", proc_output_tail(&p));
    assert_output_has(&p, "exited with code 1 while stopping");
    proc_close(&p);
}
END_TEST

START_TEST(test_given_coordinator) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    const char *args[] = {"-n",    "2",  "--verbose", "--coordinator", d.endpoint, "--job",
                          "given", "--", MEMBER_PATH, "--barriers",    "2",        NULL};
    proc p;
    run_expecting(&p, args, NULL, 0);
    assert_output_has(&p, "[rank 0] joined rank 0 world 2");
    assert_output_has(&p, "[rank 1] joined rank 1 world 2");
    ck_assert_msg(!strstr(proc_output(&p), "private ddpd"), "%s", proc_output_tail(&p));
    ck_assert_msg(proc_expect(&d.p, "job 'given' formed", WAIT_MS, NULL, 0), "%s", proc_output_tail(&d.p));
    proc_close(&p);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

START_TEST(test_environment) {
    /* Nothing listens there, and nothing needs to: the shell only prints what it got. */
    const char *script = "echo \"env $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT "
                         "$DDP_COORDINATOR $DDP_JOB\"";
    const char *args[] = {"-n",   "2", "--coordinator", "tcp://127.0.0.1:4242", "--job", "envjob", "--", "sh", "-c",
                          script, NULL};
    proc p;
    run_expecting(&p, args, NULL, 0);
    /* MASTER_PORT is torch's own store's: one free loopback port for all ranks, never ddpd's */
    int port = output_int_after(&p, "[rank 0] env 0 0 2 2 127.0.0.1 ");
    ck_assert_msg(port > 0 && port != 4242, "MASTER_PORT %d:\n%s", port, proc_output_tail(&p));
    char line[128];
    snprintf(line, sizeof(line), "[rank 0] env 0 0 2 2 127.0.0.1 %d tcp://127.0.0.1:4242 envjob\n", port);
    assert_output_has(&p, line);
    snprintf(line, sizeof(line), "[rank 1] env 1 1 2 2 127.0.0.1 %d tcp://127.0.0.1:4242 envjob\n", port);
    assert_output_has(&p, line);
    proc_close(&p);
}
END_TEST

/* Each rank gets a Unix socket in a private directory under TMPDIR, and the directory is
 * gone after the launch even when ranks left their sockets behind (as killed ones do). */
START_TEST(test_socket_directory_removed) {
    char tmpdir[] = "/tmp/check_launcher.XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    char tmpdir_env[64];
    snprintf(tmpdir_env, sizeof(tmpdir_env), "TMPDIR=%s", tmpdir);
    const char *env[] = {tmpdir_env, NULL};
    const char *script = "echo \"data $DDP_DATA_ENDPOINT\"; touch \"${DDP_DATA_ENDPOINT#ipc://}\"";
    const char *args[] = {"-n", "2", "--coordinator", "tcp://127.0.0.1:4242", "--", "sh", "-c", script, NULL};
    proc p;
    run_expecting(&p, args, env, 0);
    for (int r = 0; r < 2; r++) {
        char line[128];
        snprintf(line, sizeof(line), "[rank %d] data ipc://%s/ddp-run.", r, tmpdir);
        assert_output_has(&p, line);
        snprintf(line, sizeof(line), "/rank-%d\n", r);
        assert_output_has(&p, line);
    }
    ck_assert_msg(rmdir(tmpdir) == 0, "%s is not empty after ddp-run: %s", tmpdir, strerror(errno));
    proc_close(&p);
}
END_TEST

/* The private ddpd listens on a Unix socket in the launch's private directory (0700: no
 * other user reaches it), which goes with the launch; the ranks find it there. */
START_TEST(test_private_ddpd_socket) {
    char tmpdir[] = "/tmp/check_launcher.XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    char tmpdir_env[64];
    snprintf(tmpdir_env, sizeof(tmpdir_env), "TMPDIR=%s", tmpdir);
    const char *env[] = {tmpdir_env, NULL};
    const char *script = "s=${DDP_COORDINATOR#ipc://}; echo \"coordinator $DDP_COORDINATOR mode $(stat -c %a "
                         "\"$(dirname \"$s\")\") socket $(test -S \"$s\" && echo yes)\"";
    const char *args[] = {"-n", "1", "--", "sh", "-c", script, NULL};
    proc p;
    run_expecting(&p, args, env, 0);
    char line[160];
    snprintf(line, sizeof(line), "[rank 0] coordinator ipc://%s/ddp-run.", tmpdir);
    assert_output_has(&p, line);
    assert_output_has(&p, "/ddpd.sock mode 700 socket yes\n");
    ck_assert_msg(rmdir(tmpdir) == 0, "%s is not empty after ddp-run: %s", tmpdir, strerror(errno));
    proc_close(&p);
}
END_TEST

/* ddp_store_set/get through ddpd: a value one rank sets reaches every rank, including
 * those that asked first; a key nobody sets is a timeout that names it. */
START_TEST(test_store) {
    const char *env[] = {"DDP_TIMEOUT_MS=5000", NULL};
    const char *args[] = {"-n", "3", "--", "member", "--barriers", "0", "--store", "1", NULL};
    proc p;
    run_expecting(&p, args, env, 0);
    for (int r = 0; r < 3; r++) {
        char line[96];
        snprintf(line, sizeof(line), "[rank %d] store got 'hello from rank 0' (17 bytes)", r);
        assert_output_has(&p, line);
        snprintf(line, sizeof(line), "[rank %d] store_get failed: -%d", r, ETIMEDOUT);
        assert_output_has(&p, line);
    }
    assert_output_has(&p, "'never set'");
    proc_close(&p);
}
END_TEST

/* ddp_timeout_ms: DDP_TIMEOUT_MS when set, else the 60 s default, as every wait uses it. */
START_TEST(test_timeout_getter) {
    const char *env[] = {"DDP_TIMEOUT_MS=4321", NULL};
    const char *args[] = {"-n", "2", "--", "member", "--barriers", "1", NULL};
    proc p;
    run_expecting(&p, args, env, 0);
    assert_output_has(&p, "[rank 0] joined rank 0 world 2 pid ");
    assert_output_has(&p, " timeout 4321 ms");
    proc_close(&p);
    run_expecting(&p, args, NULL, 0);
    assert_output_has(&p, " timeout 60000 ms");
    proc_close(&p);
}
END_TEST

/* The API's edges on a real group: a NULL request is -EINVAL, not a crash; after its own
 * ddp_abort a rank's ddp_job_status says the job is over. */
START_TEST(test_api_edges) {
    const char *args[] = {"-n", "1", "--", "member", "--barriers", "0", "--edges", "1", NULL};
    proc p;
    run_expecting(&p, args, NULL, 0);
    char line[96];
    snprintf(line, sizeof(line), "[rank 0] async without a request: -%d", EINVAL);
    assert_output_has(&p, line);
    snprintf(line, sizeof(line), "[rank 0] after abort: job status -%d: job 'default' aborted by this rank: testing",
             ECONNABORTED);
    assert_output_has(&p, line);
    proc_close(&p);
}
END_TEST

/* ddp_job_status: 0 while the job runs, then the code that ended it, with the reason. */
START_TEST(test_job_status) {
    const char *args[] = {"-n", "3", "--", "member", "--barriers", "1", "--status", "1", NULL};
    proc p;
    run_launcher(&p, args, NULL);
    for (int r = 0; r < 2; r++) {
        char line[96];
        snprintf(line, sizeof(line), "[rank %d] job status -%d: ", r, ECONNABORTED);
        assert_output_has(&p, line);
    }
    assert_output_has(&p, "rank 2 gives up");
    proc_close(&p);
}
END_TEST

START_TEST(test_output_prefixed) {
    const char *script = "echo \"out $RANK\"; echo \"err $RANK\" >&2; printf 'no newline %s' \"$RANK\"";
    const char *args[] = {"-n", "2", "--", "sh", "-c", script, NULL};
    proc p;
    run_expecting(&p, args, NULL, 0);
    for (int r = 0; r < 2; r++) {
        char line[64];
        snprintf(line, sizeof(line), "[rank %d] out %d\n", r, r);
        assert_output_has(&p, line);
        snprintf(line, sizeof(line), "[rank %d] err %d\n", r, r);
        assert_output_has(&p, line);
        snprintf(line, sizeof(line), "[rank %d] no newline %d\n", r, r);
        assert_output_has(&p, line);
    }
    proc_close(&p);
}
END_TEST

/* The start of a line whose end has not come (a prompt, a progress bar, print(..., end="")
 * before a long task) goes out after LINE_STREAM_HOLD_MS (1 s), not at the rank's exit. */
START_TEST(test_partial_line_shown) {
    const char *argv[] = {DDP_RUN_PATH, "-n", "1", "--", "sh", "-c", "printf 'loading'; exec sleep 60", NULL};
    proc p;
    proc_start(&p, argv, NULL);
    ck_assert_msg(proc_expect(&p, "[rank 0] loading\n", 20000, NULL, 0), "%s", proc_output_tail(&p));
    proc_signal(&p, SIGTERM);
    ck_assert_int_eq(proc_wait(&p, WAIT_MS), 128 + SIGTERM);
    proc_close(&p);
}
END_TEST

/* Lines far over a pipe's buffer (and the 8 KiB ddp-run used to cut them at) come out
 * whole, each after its own prefix, however the ranks' output interleaves. */
START_TEST(test_long_lines_whole) {
    const char *script =
        "for i in 1 2 3; do printf long; head -c 300000 /dev/zero | tr '\\0' \"$RANK\"; echo end; done";
    const char *args[] = {"-n", "2", "--", "sh", "-c", script, NULL};
    proc p;
    run_expecting(&p, args, NULL, 0);
    const char *out = proc_output(&p);
    int whole[2] = {0, 0};
    for (const char *at = out; (at = strstr(at, "] long"));) {
        int r = at[-1] - '0';
        ck_assert_msg(r == 0 || r == 1, "a piece without its prefix near: %.40s", at - 10);
        const char *run = at + 6;
        size_t n = strspn(run, r ? "1" : "0");
        ck_assert_msg(n == 300000 && strncmp(run + n, "end\n", 4) == 0, "rank %d: a line cut after %zu", r, n);
        whole[r]++;
        at = run + n;
    }
    ck_assert_int_eq(whole[0], 3);
    ck_assert_int_eq(whole[1], 3);
    proc_close(&p);
}
END_TEST

START_TEST(test_private_ddpd_verbose) {
    const char *args[] = {"-n", "1", "--verbose", "--job", "chatty", "--", MEMBER_PATH, NULL};
    proc p;
    run_expecting(&p, args, NULL, 0);
    assert_output_has(&p, "[ddpd] ddpd: info: ddpd");
    assert_output_has(&p, "[ddpd] ddpd: info: job 'chatty' formed");
    assert_output_has(&p, "[rank 0] joined rank 0 world 1");
    int ddpd_pid = output_int_after(&p, "private ddpd (pid ");
    assert_gone(ddpd_pid);
    proc_close(&p);
}
END_TEST

START_TEST(test_killed_by_signal) {
    const char *args[] = {"-n", "1", "--", "sh", "-c", "kill -9 $$", NULL};
    proc p;
    run_expecting(&p, args, NULL, 128 + SIGKILL);
    assert_output_has(&p, "rank 0 (pid ");
    assert_output_has(&p, ") was killed by signal 9");
    proc_close(&p);
}
END_TEST

START_TEST(test_program_cannot_run) {
    static const char *const programs[] = {"no-such-program-4711", "/nonexistent/dir/prog", "/"};
    const char *args[] = {"-n", "2", "--", programs[_i], NULL};
    proc p;
    run_expecting(&p, args, NULL, 127);
    char expected[128];
    snprintf(expected, sizeof(expected), "cannot run '%s'", programs[_i]);
    assert_output_has(&p, expected);
    proc_close(&p);
}
END_TEST

START_TEST(test_usage_errors) {
    struct {
        const char *args[8];
        const char *env;
        int code;
        const char *expected;
    } cases[] = {
        {{"-n", "0", "--", "true"}, NULL, 2, "--nproc: 0 is out of range [1, 1024]"},
        {{"-n", "1025", "--", "true"}, NULL, 2, "--nproc: 1025 is out of range [1, 1024]"},
        {{"-n", "2"}, NULL, 2, "no PROGRAM to run"},
        {{"--", "true"}, NULL, 2, "-n/--nproc N is required"},
        {{"-n", "1", "--job", "no spaces", "--", "true"}, NULL, 2, "--job: 'no spaces' is not"},
        {{"-n", "1", "--grace-ms", "-1", "--", "true"}, NULL, 2, "--grace-ms: -1 is out of range"},
        {{"--bogus"}, NULL, 2, "unknown option '--bogus'"},
        {{"-n", "1", "--", "true"}, "DDP_RUN_BOGUS=1", 2, "unknown variable DDP_RUN_BOGUS"},
        /* From the environment, and options end at PROGRAM even without "--". */
        {{"sh", "-c", "echo \"world $WORLD_SIZE\"", "-n"}, "DDP_RUN_NPROC=2", 0, "[rank 1] world 2"},
        {{"--help"}, NULL, 0, "Usage: ddp-run -n N"},
        {{"--version"}, NULL, 0, "ddp-run "},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *env[] = {cases[i].env, NULL};
        proc p;
        int code = run_launcher(&p, cases[i].args, env);
        ck_assert_msg(code == cases[i].code, "case %zu (%s) exited %d: %s", i, cases[i].args[0], code,
                      proc_output_tail(&p));
        assert_output_has(&p, cases[i].expected);
        proc_close(&p);
    }
}
END_TEST

/* --max-restarts: a job that fails once is started again and then succeeds; without
 * restarts the failure stands. The marker file carries "failed once" across attempts. */
START_TEST(test_max_restarts) {
    char marker[64], script[256];
    snprintf(marker, sizeof(marker), "/tmp/check_launcher_restart_%d", (int)getpid());
    unlink(marker);
    snprintf(script, sizeof(script), "if [ \"$RANK\" = 1 ] && [ ! -e %s ]; then touch %s; exit 3; fi; exit 0", marker,
             marker);
    const char *once[] = {"-n", "2", "--max-restarts", "2", "--", "sh", "-c", script, NULL};
    proc p;
    run_expecting(&p, once, NULL, 0);
    assert_output_has(&p, "starting it again (1 of 2 restarts)");
    proc_close(&p);
    unlink(marker);
    const char *none[] = {"-n", "2", "--", "sh", "-c", script, NULL};
    run_expecting(&p, none, NULL, 3);
    proc_close(&p);
    unlink(marker);
}
END_TEST

/* A stop signal while a failed job is ending (its last rank in its grace period) ends
 * ddp-run: --max-restarts does not start the job again, whatever the exit code. Rank 1
 * fails once rank 0 ignores SIGTERM, so that the grace period is there to be cut short. */
START_TEST(test_stop_signal_not_restarted) {
    char marker[64], script[512];
    snprintf(marker, sizeof(marker), "/tmp/check_launcher_stop_%d", (int)getpid());
    unlink(marker);
    snprintf(script, sizeof(script),
             "if [ \"$RANK\" = 0 ]; then trap '' TERM; touch %s; sleep 30; exit 0; fi; "
             "while [ ! -e %s ]; do sleep 0.05; done; exit 1",
             marker, marker);
    const char *argv[] = {DDP_RUN_PATH, "-n", "2",  "--max-restarts", "3", "--grace-ms", "60000",
                          "--",         "sh", "-c", script,           NULL};
    proc p;
    proc_start(&p, argv, NULL);
    ck_assert_msg(proc_expect(&p, "stopping the other ranks", WAIT_MS, NULL, 0), "%s", proc_output_tail(&p));
    proc_signal(&p, SIGINT);
    int code = proc_wait(&p, WAIT_MS);
    ck_assert_msg(code == 1, "ddp-run exited %d, not 1 (the failed rank's):\n%s", code, proc_output_tail(&p));
    /* the first signal after the failure goes to rank 0 (which takes SIGINT) */
    assert_output_has(&p, "received SIGINT while the ranks stop after a failure; forwarding it");
    ck_assert_msg(!strstr(proc_output(&p), "starting it again"), "%s", proc_output_tail(&p));
    proc_close(&p);
    unlink(marker);
}
END_TEST

/* Started under nohup (SIGHUP ignored): ddp-run and its ranks go on through a SIGHUP, as
 * with any program a shell starts so. */
START_TEST(test_ignored_hangup) {
    const char *rank = "kill -HUP $$; echo \"ready $RANK\"; sleep 1; echo \"done $RANK\"";
    const char *argv[] = {"/bin/sh", "-c", "trap '' HUP; exec \"$0\" -n 2 -- sh -c \"$1\"", DDP_RUN_PATH, rank, NULL};
    proc p;
    proc_start(&p, argv, NULL);
    for (int r = 0; r < 2; r++)
        ck_assert_msg(proc_expect(&p, "] ready ", WAIT_MS, NULL, 0), "%s", proc_output_tail(&p));
    proc_signal(&p, SIGHUP);
    ck_assert_msg(proc_wait(&p, WAIT_MS) == 0, "%s", proc_output_tail(&p));
    assert_output_has(&p, "[rank 0] done 0");
    assert_output_has(&p, "[rank 1] done 1");
    ck_assert_msg(!strstr(proc_output(&p), "received SIGHUP"), "%s", proc_output_tail(&p));
    proc_close(&p);
}
END_TEST

/* Output to a full disk (/dev/full as stdout): the ranks finish, ddp-run says on stderr
 * what was lost and exits 1, not 0; a reader that goes away (`| head -c 0`) is no error. */
START_TEST(test_output_to_a_full_disk) {
    const char *full[] = {"/bin/sh", "-c", "\"$0\" -n 2 -- echo hello > /dev/full", DDP_RUN_PATH, NULL};
    proc p;
    proc_start(&p, full, NULL);
    ck_assert_int_eq(proc_wait(&p, WAIT_MS), 1);
    ck_assert_msg(strstr(proc_output(&p), "its output could not be written (No space left on device): the lines "
                                          "after it were lost"),
                  "%s", proc_output_tail(&p));
    proc_close(&p);
    /* ddp-run's exit code on stderr: head's is the pipeline's */
    const char *gone[] = {"/bin/sh", "-c",
                          "{ \"$0\" -n 2 -- sh -c 'sleep 0.5; echo hello'; echo \"ddp-run exited $?\" >&2; } | "
                          "head -c 0",
                          DDP_RUN_PATH, NULL};
    proc_start(&p, gone, NULL);
    ck_assert_int_eq(proc_wait(&p, WAIT_MS), 0);
    ck_assert_msg(strstr(proc_output(&p), "ddp-run exited 0") && !strstr(proc_output(&p), "could not be written"), "%s",
                  proc_output_tail(&p));
    proc_close(&p);
}
END_TEST

/* Output nobody reads (a pager left waiting, a full pipe) holds ddp-run's output, not
 * ddp-run: a rank that fails is reaped and the other stopped as ever (the ranks' pids are
 * gone: ddp-run reaped them), and the output comes whole once the reader reads. */
START_TEST(test_output_not_read) {
    char dir[] = "/tmp/check_launcher.XXXXXX", fifo[64], dir_env[64];
    scratch_dir(dir, dir_env, sizeof(dir_env), fifo, sizeof(fifo));
    const char *rank = "echo $$ > \"$DIR/pid$RANK\"; if [ $RANK = 0 ]; then yes | head -c 4000000; sleep 600; "
                       "else sleep 1; exit 3; fi";
    /* ddp-run's output, and then its exit code, into a pipe read once the test says go */
    const char *argv[] = {"/bin/sh",
                          "-c",
                          "{ \"$0\" -n 2 -- sh -c \"$1\"; echo \"ddp-run exited $?\"; } 2>&1 | "
                          "{ read go < \"$DIR/go\"; cat; }",
                          DDP_RUN_PATH,
                          rank,
                          NULL};
    const char *env[] = {dir_env, NULL};
    proc p;
    proc_start(&p, argv, env);
    int pids[2];
    for (int r = 0; r < 2; r++) {
        char path[96];
        snprintf(path, sizeof(path), "%s/pid%d", dir, r);
        pids[r] = read_number_file(path);
        unlink(path);
    }
    for (int i = 0; i < WAIT_MS / 20 && (kill(pids[0], 0) == 0 || kill(pids[1], 0) == 0); i++)
        usleep(20000);
    ck_assert_msg(kill(pids[0], 0) < 0 && kill(pids[1], 0) < 0,
                  "with its output not read, ddp-run did not reap rank 1 (pid %d) and stop rank 0 (pid %d)", pids[1],
                  pids[0]);
    FILE *go = fopen(fifo, "w");
    ck_assert_ptr_nonnull(go);
    fputs("go\n", go);
    fclose(go);
    ck_assert_int_eq(proc_wait(&p, WAIT_MS), 0);
    char stopped[96];
    snprintf(stopped, sizeof(stopped), "rank 1 (pid %d) exited with code 3; stopping the other ranks", pids[1]);
    assert_output_has(&p, stopped);
    assert_output_has(&p, "[rank 0] y\n[rank 0] y\n");
    assert_output_has(&p, "ddp-run exited 3");
    ck_assert_msg(!strstr(proc_output(&p), "\ny\n") && !strstr(proc_output(&p), "]  y"), "a line cut: %s",
                  proc_output_tail(&p));
    proc_close(&p);
    unlink(fifo);
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* A stop signal while ddp-run waits for its reader to take the last of a failed job's
 * output: the rest is dropped and the job is not started again (--max-restarts). */
START_TEST(test_stop_during_final_output) {
    char dir[] = "/tmp/check_launcher.XXXXXX", fifo[64], dir_env[64];
    scratch_dir(dir, dir_env, sizeof(dir_env), fifo, sizeof(fifo));
    /* more than a pipe holds, then a failure; each attempt adds a line to $DIR/attempts */
    const char *rank = "echo $$ >> \"$DIR/attempts\"; yes | head -c 400000; exit 3";
    const char *argv[] = {"/bin/sh",
                          "-c",
                          "{ \"$0\" -n 1 --max-restarts 2 -- sh -c \"$1\" & echo $! > \"$DIR/pid\"; wait $!; "
                          "echo \"ddp-run exited $?\"; } 2>&1 | { read go < \"$DIR/go\"; cat; }",
                          DDP_RUN_PATH,
                          rank,
                          NULL};
    const char *env[] = {dir_env, NULL};
    proc p;
    proc_start(&p, argv, env);
    char path[96];
    snprintf(path, sizeof(path), "%s/pid", dir);
    int launcher_pid = read_number_file(path);
    snprintf(path, sizeof(path), "%s/attempts", dir);
    int first = read_number_file(path);
    for (int i = 0; i < WAIT_MS / 20 && kill(first, 0) == 0; i++) /* reaped: the job is over */
        usleep(20000);
    ck_assert_msg(kill(first, 0) < 0, "rank 0 (pid %d) was not reaped", first);
    ck_assert_int_eq(kill(launcher_pid, SIGTERM), 0); /* ddp-run waits for its reader meanwhile */
    FILE *go = fopen(fifo, "w");
    ck_assert_ptr_nonnull(go);
    fputs("go\n", go);
    fclose(go);
    ck_assert_int_eq(proc_wait(&p, WAIT_MS), 0);
    assert_output_has(&p, "ddp-run exited 3"); /* the failed rank's code, the first cause */
    ck_assert_msg(!strstr(proc_output(&p), "starting it again"), "%s", proc_output_tail(&p));
    FILE *f = fopen(path, "r");
    int attempts = 0, pid;
    while (f && fscanf(f, "%d", &pid) == 1)
        attempts++;
    if (f)
        fclose(f);
    ck_assert_int_eq(attempts, 1);
    unlink(path);
    snprintf(path, sizeof(path), "%s/pid", dir);
    unlink(path);
    unlink(fifo);
    ck_assert_int_eq(rmdir(dir), 0);
    proc_close(&p);
}
END_TEST

/* What a rank started and left running when it exited is ended with the job: ddp-run
 * signals the exited rank's process group. */
START_TEST(test_leftovers_ended) {
    char dir[] = "/tmp/check_launcher.XXXXXX", dir_env[64];
    scratch_dir(dir, dir_env, sizeof(dir_env), NULL, 0);
    const char *env[] = {dir_env, NULL};
    /* rank 0 leaves a sleep behind; rank 1 runs a while longer, so the job is not over */
    const char *script = "if [ $RANK = 0 ]; then sleep 600 > /dev/null 2>&1 & echo $! > \"$DIR/left\"; "
                         "else sleep 1; fi";
    const char *args[] = {"-n", "2", "--", "sh", "-c", script, NULL};
    proc p;
    run_expecting(&p, args, env, 0);
    char path[96];
    snprintf(path, sizeof(path), "%s/left", dir);
    int left = read_number_file(path);
    unlink(path);
    ck_assert_int_eq(rmdir(dir), 0);
    for (int i = 0; i < WAIT_MS / 20 && process_runs(left); i++)
        usleep(20000);
    ck_assert_msg(!process_runs(left), "the sleep rank 0 left (pid %d) outlived ddp-run: %s", left,
                  proc_output_tail(&p));
    assert_output_has(&p, "processes that rank 0 (pid ");
    proc_close(&p);
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("launcher");
    TCase *tc = tcase_create("launcher");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_four_ranks);
    tcase_add_test(tc, test_max_restarts);
    tcase_add_test(tc, test_stop_signal_not_restarted);
    tcase_add_test(tc, test_ignored_hangup);
    tcase_add_test(tc, test_output_not_read);
    tcase_add_test(tc, test_output_to_a_full_disk);
    tcase_add_test(tc, test_leftovers_ended);
    tcase_add_test(tc, test_stop_during_final_output);
    tcase_add_test(tc, test_many_ranks);
    tcase_add_test(tc, test_first_failure_stops_the_rest);
    tcase_add_test(tc, test_crash_reaped_with_another);
    tcase_add_test(tc, test_first_signal_after_a_failure);
    tcase_add_loop_test(tc, test_signal_forwarded, 0, 2);
    tcase_add_test(tc, test_sigkill_after_grace);
    tcase_add_test(tc, test_failed_stop_is_news);
    tcase_add_test(tc, test_crowd_is_not_dead);
    tcase_add_test(tc, test_given_coordinator);
    tcase_add_test(tc, test_environment);
    tcase_add_test(tc, test_socket_directory_removed);
    tcase_add_test(tc, test_private_ddpd_socket);
    tcase_add_test(tc, test_store);
    tcase_add_test(tc, test_timeout_getter);
    tcase_add_test(tc, test_api_edges);
    tcase_add_test(tc, test_job_status);
    tcase_add_test(tc, test_output_prefixed);
    tcase_add_test(tc, test_long_lines_whole);
    tcase_add_test(tc, test_partial_line_shown);
    tcase_add_test(tc, test_private_ddpd_verbose);
    tcase_add_test(tc, test_killed_by_signal);
    tcase_add_loop_test(tc, test_program_cannot_run, 0, 3);
    tcase_add_test(tc, test_usage_errors);
    suite_add_tcase(s, tc);
    return check_main(s, argc, argv);
}
