/* torch_ddpd, the backend "ddpd" of torch.distributed: the seed tutorials' Python programs
 * and the collectives against references (tests/torch/), under ddp-run and under torchrun,
 * and what a PyTorch job sees when a rank dies or the ranks disagree. Skipped (77) where
 * the module was not built (no PyTorch, or a sanitizer build: python3 is not instrumented). */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/check_main.h"
#include "tests/integration/harness.h"

#define WAIT_MS 90000      /* one job, at most */
#define CASE_TIMEOUT_S 270 /* a case, at most; under CTest's 300 s (tests/CMakeLists.txt) */

#ifdef TORCH_DDPD_PYTHONPATH
static const char *const python_env[] = {"PYTHONPATH=" TORCH_DDPD_PYTHONPATH, NULL};

/* Runs ddp-run -n n -- python3 TORCH_TESTS_DIR/script [arg] to its end. */
static int run_script(proc *p, int n, const char *script, const char *arg) {
    char n_text[8], path[512];
    snprintf(n_text, sizeof(n_text), "%d", n);
    snprintf(path, sizeof(path), "%s/%s", TORCH_TESTS_DIR, script);
    const char *argv[] = {DDP_RUN_PATH, "-n", n_text, "--", PYTHON3_PATH, path, arg, NULL};
    proc_start(p, argv, python_env);
    return proc_wait(p, WAIT_MS);
}

static int count_of(proc *p, const char *needle) {
    int n = 0;
    for (const char *s = proc_output(p); (s = strstr(s, needle)); s++)
        n++;
    return n;
}

/* A loopback port nothing listens on now (for torch's own store). */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    ck_assert(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    ck_assert(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* A line a program prints, and how many times (once by rank 0, or once by each rank). */
typedef struct {
    const char *line;
    int times;
} expectation;

/* Each program at a world it is written for, run once, with the lines it must print. */
typedef struct {
    const char *script, *arg;
    int n;
    expectation expected[4]; /* ended by a NULL line */
} program;

/* The seed tutorial's programs, in Python. */
static const program tutorials[] = {
    {"p2p.py", NULL, 2, {{"Rank  1  has data  tensor(1.)", 1}, {"Rank  1  has data  tensor(2.)  (non-blocking)", 1}}},
    {"send_back.py", NULL, 3, {{"Rank 0 sum: [3.0, 5.0, 7.0]", 1}}},
    {"gather_reduce.py",
     NULL,
     4,
     {{"Rank 0 gathered [0.0, 1.0, 2.0, 3.0]", 1}, {"Rank 0 has [4.0, 4.0, 4.0]", 1}, {" has  [12, 16]", 4}}},
    {"average_gradients.py", "40", 2, {{": parameters identical on every rank", 2}}},
    {"average_gradients.py", "40", 4, {{": parameters identical on every rank", 4}}},
};

/* DistributedDataParallel, and every collective against references. */
static const program ddp_programs[] = {
    {"ddp_toy.py",
     NULL,
     2,
     {{"with its own all-reduce matches one process on the concatenated batch", 2},
      {"with a comm hook matches one process on the concatenated batch", 2},
      {": DDP with PowerSGD: every rank holds the same parameters", 2}}},
    {"ddp_toy.py",
     NULL,
     3,
     {{"with its own all-reduce matches one process on the concatenated batch", 3},
      {"with a comm hook matches one process on the concatenated batch", 3},
      {": DDP with PowerSGD: every rank holds the same parameters", 3}}},
    {"collectives.py", NULL, 2, {{": all checks passed", 2}}},
    {"collectives.py", NULL, 3, {{": all checks passed", 3}}},
    {"collectives.py", NULL, 4, {{": all checks passed", 4}}},
    {"reinit.py", NULL, 2, {{": incarnation 1 done", 2}}},
    {"chained.py", NULL, 2, {{": 40 chains in flight, 3 times: all sums right", 2}}},
    {"p2p_order.py", NULL, 2, {{": point-to-point around collectives: all patterns done", 2}}},
    {"exit_callback.py", NULL, 2, {{": exiting with a callback in flight", 2}}},
};

static void run_program(const program *prog) {
    proc p;
    int code = run_script(&p, prog->n, prog->script, prog->arg);
    ck_assert_msg(code == 0, "%s -n %d exited %d: %s", prog->script, prog->n, code, proc_output_tail(&p));
    for (const expectation *e = prog->expected; e->line; e++)
        ck_assert_msg(count_of(&p, e->line) == e->times, "expected '%s' %d times in: %s", e->line, e->times,
                      proc_output_tail(&p));
    proc_close(&p);
}

START_TEST(test_tutorial) {
    run_program(&tutorials[_i]);
}
END_TEST

START_TEST(test_ddp_program) {
    run_program(&ddp_programs[_i]);
}
END_TEST

/* A rank SIGKILLed while its peers are in an all-reduce: each of them raises, naming it. */
START_TEST(test_killed_rank) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    char coordinator[DDP_MAX_ENDPOINT + 32], master_port[32], path[512];
    snprintf(coordinator, sizeof(coordinator), "DDP_COORDINATOR=%s", d.endpoint);
    snprintf(master_port, sizeof(master_port), "MASTER_PORT=%d", free_port());
    snprintf(path, sizeof(path), "%s/faults.py", TORCH_TESTS_DIR);
    proc ranks[3];
    for (int r = 0; r < 3; r++) {
        char rank[16];
        snprintf(rank, sizeof(rank), "RANK=%d", r);
        const char *env[] = {python_env[0],  coordinator, "DDP_JOB=torch-killed",
                             "WORLD_SIZE=3", rank,        "MASTER_ADDR=127.0.0.1",
                             master_port,    NULL};
        const char *argv[] = {PYTHON3_PATH, path, "loop", NULL};
        proc_start(&ranks[r], argv, env);
    }
    for (int r = 0; r < 3; r++)
        ck_assert_msg(proc_expect(&ranks[r], "is looping", WAIT_MS, NULL, 0), "rank %d: %s", r,
                      proc_output_tail(&ranks[r]));
    kill(ranks[2].pid, SIGKILL);
    char named[64];
    snprintf(named, sizeof(named), "rank 2 (pid %d on ", (int)ranks[2].pid);
    for (int r = 0; r < 2; r++) {
        char line[1024];
        ck_assert_msg(proc_expect(&ranks[r], "raised ", WAIT_MS, line, sizeof(line)), "rank %d: %s", r,
                      proc_output_tail(&ranks[r]));
        ck_assert_msg(strstr(line, named) && strstr(line, "died"), "rank %d: expected '%s' ... 'died' in: %s", r, named,
                      line);
        printf("%s\n", line); /* how long it took, for the README */
        ck_assert_int_eq(proc_wait(&ranks[r], WAIT_MS), 1);
    }
    for (int r = 0; r < 3; r++)
        proc_close(&ranks[r]);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

/* The group's timeout is libddp's: a rank that does not come (alive, sleeping) is named when
 * it runs out, and meanwhile ddpctl status shows the PyTorch job like any other, with each
 * rank's calls as its step and what rank 0 waits in, for whom. Rank 0 catches the error
 * and goes on: the job ends all the same, and rank 1's next call raises at once, with
 * rank 0's reason. */
START_TEST(test_timeout_and_status) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    char coordinator[DDP_MAX_ENDPOINT + 32], master_port[32], path[512];
    snprintf(coordinator, sizeof(coordinator), "DDP_COORDINATOR=%s", d.endpoint);
    snprintf(master_port, sizeof(master_port), "MASTER_PORT=%d", free_port());
    snprintf(path, sizeof(path), "%s/faults.py", TORCH_TESTS_DIR);
    char go[64], go_env[96];
    snprintf(go, sizeof(go), "/tmp/check_torch_go_%d", (int)getpid());
    snprintf(go_env, sizeof(go_env), "FAULTS_GO_FILE=%s", go);
    unlink(go);
    proc ranks[2];
    for (int r = 0; r < 2; r++) {
        char rank[16];
        snprintf(rank, sizeof(rank), "RANK=%d", r);
        const char *env[] = {python_env[0],  coordinator, "DDP_JOB=torch-timeout",
                             "WORLD_SIZE=2", rank,        "MASTER_ADDR=127.0.0.1",
                             master_port,    go_env,      NULL};
        const char *argv[] = {PYTHON3_PATH, path, "timeout", NULL};
        proc_start(&ranks[r], argv, env);
    }
    for (int r = 0; r < 2; r++)
        ck_assert_msg(proc_expect(&ranks[r], "did 5 all-reduces", WAIT_MS, NULL, 0), "rank %d: %s", r,
                      proc_output_tail(&ranks[r]));
    const char *ctl[] = {DDPCTL_PATH, "--coordinator", d.endpoint, "status", NULL};
    const char *ctl_json[] = {DDPCTL_PATH, "--coordinator", d.endpoint, "--json", "status", NULL};
    bool waiting = false, job = false;
    for (int i = 0; i < 100 && !waiting; i++) {
        proc c;
        proc_start(&c, ctl, NULL);
        ck_assert_int_eq(proc_wait(&c, WAIT_MS), 0);
        job = job || strstr(proc_output(&c), "torch-timeout");
        waiting = strstr(proc_output(&c), "rank 0 has waited") && strstr(proc_output(&c), "for rank 1");
        proc_close(&c);
        usleep(50000);
    }
    ck_assert_msg(job && waiting, "ddpctl status never showed rank 0 waiting for rank 1 in job torch-timeout");
    proc c; /* each rank's step: the calls it completed */
    proc_start(&c, ctl_json, NULL);
    ck_assert_int_eq(proc_wait(&c, WAIT_MS), 0);
    ck_assert_msg(count_of(&c, "\"step\":\t5") + count_of(&c, "\"step\":5") == 2, "%s", proc_output_tail(&c));
    proc_close(&c);
    char line[1024];
    ck_assert_msg(proc_expect(&ranks[0], "raised after", WAIT_MS, line, sizeof(line)), "%s",
                  proc_output_tail(&ranks[0]));
    ck_assert_msg(strstr(line, "timed out after 6000 ms waiting for rank 1"), "%s", line);
    /* rank 0 caught it and goes on: ddpd ends the job all the same, and rank 1, called on
     * then, learns so from the job's end, not from its own timeout */
    ck_assert_msg(proc_expect(&d.p, "job 'torch-timeout' (generation 1) aborted: rank 0 (pid ", WAIT_MS, NULL, 0), "%s",
                  proc_output_tail(&d.p));
    FILE *f = fopen(go, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    ck_assert_msg(proc_expect(&ranks[1], "raised after", WAIT_MS, line, sizeof(line)), "%s",
                  proc_output_tail(&ranks[1]));
    /* the job's end, or (should it come first) rank 0's call withdrawn from shared memory */
    ck_assert_msg((strstr(line, "job 'torch-timeout' aborted: rank 0 (pid ") &&
                   strstr(line, "ddpd:allreduce failed on rank 0: ") &&
                   strstr(line, "timed out after 6000 ms waiting for rank 1")) ||
                      strstr(line, "all_reduce #6: rank 0 gave up on it (it failed there"),
                  "%s", line);
    ck_assert_int_eq(proc_wait(&ranks[1], WAIT_MS), 1);
    unlink(go);
    for (int r = 0; r < 2; r++)
        proc_close(&ranks[r]);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

/* Ranks that call different collectives: every one of them raises, saying how they differ. */
START_TEST(test_mismatch) {
    proc p;
    run_script(&p, 2, "faults.py", "mismatch");
    ck_assert_msg(count_of(&p, "raised: collective #1: rank ") == 2 && count_of(&p, "no error") == 0, "%s",
                  proc_output_tail(&p));
    ck_assert_msg(strstr(proc_output(&p), "called all_reduce(count 5, f32"), "%s", proc_output_tail(&p));
    proc_close(&p);
}
END_TEST

/* torch fails on one rank only, on the comm thread after a broadcast: that rank raises
 * torch's error, and aborts the job so that the others raise at their next call, naming
 * it, instead of waiting for it. */
START_TEST(test_torch_error_on_one_rank) {
    proc p;
    run_script(&p, 3, "faults.py", "torch");
    ck_assert_msg(count_of(&p, "rank 1 raised: The size of tensor a") == 1, "%s", proc_output_tail(&p));
    ck_assert_msg(count_of(&p, "raised: job 'default' aborted: rank 1 (pid ") == 2 &&
                      count_of(&p, "gave up: ddpd:broadcast failed on rank 1: The size of tensor a") >= 2 &&
                      count_of(&p, "no error") == 0 && !strstr(proc_output(&p), "Exception raised from"),
                  "%s", proc_output_tail(&p));
    proc_close(&p);
}
END_TEST

/* torchrun starts the ranks (and its own store on MASTER_PORT); ddpd comes from DDP_COORDINATOR. */
START_TEST(test_torchrun) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    char coordinator[DDP_MAX_ENDPOINT + 32], master_port[32], path[512];
    snprintf(coordinator, sizeof(coordinator), "DDP_COORDINATOR=%s", d.endpoint);
    snprintf(master_port, sizeof(master_port), "--master_port=%d", free_port());
    snprintf(path, sizeof(path), "%s/gather_reduce.py", TORCH_TESTS_DIR);
    const char *env[] = {python_env[0], coordinator, "DDP_JOB=torchrun", "OMP_NUM_THREADS=1", NULL};
    /* Debian's torchrun 1.13 under Python 3.11 fails on the default "0" of --redirects and
     * --tee (enum.Flag no longer lists 0 among its members): "2" keeps stdout as it is. */
    const char *argv[] = {TORCHRUN_PATH, "--nnodes=1", "--nproc_per_node=2", "--redirects=2", "--tee=2", master_port,
                          path,          NULL};
    proc p;
    proc_start(&p, argv, env);
    ck_assert_msg(proc_wait(&p, WAIT_MS) == 0, "%s", proc_output_tail(&p));
    ck_assert_msg(count_of(&p, " has  [2, 4]") == 2, "%s", proc_output_tail(&p));
    ck_assert_msg(proc_expect(&d.p, "job 'torchrun' formed", WAIT_MS, NULL, 0), "%s", proc_output_tail(&d.p));
    proc_close(&p);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST
#endif

int main(int argc, char **argv) {
#ifndef TORCH_DDPD_PYTHONPATH
    (void)argc;
    (void)argv;
    fprintf(stderr, "check_torch: torch_ddpd was not built (no PyTorch, or a sanitizer build): skipped\n");
    return 77;
#else
    Suite *s = suite_create("torch");
    TCase *tc = tcase_create("tutorials");
    tcase_set_timeout(tc, CASE_TIMEOUT_S);
    tcase_add_loop_test(tc, test_tutorial, 0, sizeof(tutorials) / sizeof(tutorials[0]));
    suite_add_tcase(s, tc);
    tc = tcase_create("ddp");
    tcase_set_timeout(tc, CASE_TIMEOUT_S);
    tcase_add_loop_test(tc, test_ddp_program, 0, sizeof(ddp_programs) / sizeof(ddp_programs[0]));
    suite_add_tcase(s, tc);
    tc = tcase_create("faults");
    tcase_set_timeout(tc, CASE_TIMEOUT_S);
    tcase_add_test(tc, test_killed_rank);
    tcase_add_test(tc, test_mismatch);
    tcase_add_test(tc, test_torch_error_on_one_rank);
    tcase_add_test(tc, test_timeout_and_status);
    suite_add_tcase(s, tc);
    tc = tcase_create("torchrun");
    tcase_set_timeout(tc, CASE_TIMEOUT_S);
    tcase_add_test(tc, test_torchrun);
    suite_add_tcase(s, tc);
    return check_main(s, argc, argv);
#endif
}
