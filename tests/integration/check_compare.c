/* ddp-compare on four workers of the mlp model: the report's numbers show DataParallel's
 * imbalance and DDP's balance, report.json follows the committed schema, report.svg is
 * XML that names every mode (tests/compare/report_checks.c). */
#include <cJSON.h>
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "tests/check_main.h"
#include "tests/compare/report_checks.h"
#include "tests/integration/harness.h"

#define WAIT_MS 100000 /* one launch, at most */

static char dir[64];

static void setup(void) {
    snprintf(dir, sizeof(dir), "/tmp/check_compare_%d", (int)getpid());
    mkdir(dir, 0755);
    idx_write_split(dir, "train", 1024, 28, 3);
    idx_write_split(dir, "t10k", 256, 28, 4);
}

static void teardown(void) {
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static const cJSON *mode_of(const cJSON *report, const char *name) {
    const cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItem(report, "modes")) if (!strcmp(cJSON_GetObjectItem(m, "mode")->valuestring,
                                                                            name)) return m;
    ck_abort_msg("mode %s not in the report", name);
    return NULL;
}

static double rank_memory(const cJSON *mode, int rank) {
    return cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(mode, "ranks"), rank), "peak_tracked_bytes")
        ->valuedouble;
}

START_TEST(test_compare_mlp_on_four) {
    char out[128];
    snprintf(out, sizeof(out), "%s/out", dir);
    const char *argv[] = {DDP_COMPARE_PATH, "-n", "4",       "--modes", "dp,ddp,ps", "--steps", "4", "--out", out, "--",
                          "--data",         dir,  "--model", "mlp",     NULL};
    proc p;
    proc_start(&p, argv, NULL);
    int code = proc_wait(&p, WAIT_MS);
    ck_assert_msg(code == 0, "exit %d: %s", code, proc_output_tail(&p));
    ck_assert_msg(strstr(proc_output(&p), "| mode | transport | samples/s |"), "%s", proc_output_tail(&p));
    proc_close(&p);

    char path[256];
    snprintf(path, sizeof(path), "%s/report.json", out);
    char *text = report_read_file(path);
    report_check_json(text);
    cJSON *report = cJSON_Parse(text);

    /* DataParallel: rank 0 holds the velocity and the gathered outputs on top of what every rank holds */
    const cJSON *dp = mode_of(report, "dp");
    double n_params = 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10, outputs = 128.0 * 10 * sizeof(float);
    double extra = n_params * sizeof(float) + outputs;
    for (int r = 1; r < 4; r++)
        ck_assert_msg(rank_memory(dp, 0) - rank_memory(dp, r) >= extra,
                      "dp: rank 0 holds %.0f bytes, rank %d %.0f: not %.0f more", rank_memory(dp, 0), r,
                      rank_memory(dp, r), extra);
    /* DDP: every rank alike */
    const cJSON *ddp = mode_of(report, "ddp");
    double lo = rank_memory(ddp, 0), hi = lo;
    for (int r = 1; r < 4; r++) {
        double m = rank_memory(ddp, r);
        lo = m < lo ? m : lo;
        hi = m > hi ? m : hi;
    }
    ck_assert_msg(hi <= lo * 1.05, "ddp: memory ranges from %.0f to %.0f bytes", lo, hi);
    ck_assert_msg(cJSON_GetObjectItem(dp, "memory_imbalance")->valuedouble > 1.05, "dp shows no imbalance");
    /* ps: the busiest link goes to ddpd */
    const cJSON *ps = mode_of(report, "ps");
    ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(ps, "busiest_link"), "to")->valuestring, "ddpd");
    cJSON_Delete(report);
    free(text);

    snprintf(path, sizeof(path), "%s/report.svg", out);
    char *svg = report_read_file(path);
    static const char *const modes[] = {"dp", "ddp", "ps"};
    report_check_svg(svg, modes, 3);
    free(svg);
    snprintf(path, sizeof(path), "%s/report.md", out);
    char *md = report_read_file(path);
    /* one host: the ranks' collectives go through shared memory */
    ck_assert_msg(strstr(md, "| dp | shm |") && strstr(md, "| ddp | shm |") && strstr(md, "| ps | shm |"), "%s", md);
    free(md);
}
END_TEST

START_TEST(test_bad_flags) {
    const char *argv[] = {DDP_COMPARE_PATH, "-n", "2", "--modes", "dp,allreduce", NULL};
    proc p;
    proc_start(&p, argv, NULL);
    ck_assert_int_eq(proc_wait(&p, WAIT_MS), 2);
    ck_assert_msg(strstr(proc_output(&p), "'allreduce' is not ddp, dp or ps"), "%s", proc_output_tail(&p));
    proc_close(&p);
    /* a mode twice; a flag it sets itself after --; an --out that is a file: refused before any run */
    char file[128];
    snprintf(file, sizeof(file), "%s/a-file", dir);
    FILE *f = fopen(file, "w");
    fclose(f);
    const struct {
        const char *args[8];
        const char *expected;
    } cases[] = {
        {{"--modes", "ddp,ddp"}, "'ddp' is not ddp, dp or ps (each at most once)"},
        {{"--modes", "ddp", "--", "--mode", "dp"}, "--mode after --: ddp-compare sets it for each run"},
        {{"--", "--steps=5"}, "--steps after --"},
        {{"--", "--ste=5"}, "--ste after --"}, /* getopt would take it for --steps */
        {{"--", "--me", "x.jsonl"}, "--me after --: ddp-compare sets it for each run (--metrics;"},
        {{"--", "--re"}, "the workers would be given --resume"},
        {{"--", "--check", "c.ckpt"}, "the worker args after --: unknown option '--check'"}, /* two it begins */
        {{"--modes", ","}, "--modes ',' lists none of ddp, dp or ps"},
        {{"--", "--model", "mlp", "extra"}, "the worker args after --: extra: the workers would refuse it"},
        {{"--", "--help"}, "the worker args after --: --help: the workers would train nothing"},
        {{"--", "--model", "mlp", "--"}, "a second -- in the worker args"},
        {{"--transports", ","}, "--transports ',' lists none of shm, zmq or nccl"},
        {{"--", "--checkpoint", "c.ckpt"}, "every run would share it"},
        {{"--", "--metrics", "x.jsonl"}, "--metrics after --"},
        {{"--transports", "shm,tcp"}, "'tcp' is not shm, zmq or nccl"},
        {{"--transports", "zmq,zmq"}, "'zmq' is not shm, zmq or nccl (each at most once)"},
        {{"--transports", "shm", "--", "--transport", "zmq"}, "--transport after --: ddp-compare sets it"},
        {{"--out", file}, "exists and is not a directory"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *a[12] = {DDP_COMPARE_PATH, "-n", "2"};
        size_t k = 3;
        for (size_t j = 0; cases[i].args[j]; j++)
            a[k++] = cases[i].args[j];
        a[k] = NULL;
        proc_start(&p, a, NULL);
        ck_assert_int_eq(proc_wait(&p, WAIT_MS), 2);
        ck_assert_msg(strstr(proc_output(&p), cases[i].expected), "expected '%s' in: %s", cases[i].expected,
                      proc_output_tail(&p));
        ck_assert_msg(!strstr(proc_output(&p), " mode"), "a run started: %s", proc_output_tail(&p));
        proc_close(&p);
    }
    /* a checkpoint from the workers' environment counts as one given after -- */
    const char *env[] = {"DDP_WORKER_CHECKPOINT=shared.ckpt", NULL};
    const char *plain[] = {DDP_COMPARE_PATH, "-n", "2", NULL};
    proc_start(&p, plain, env);
    ck_assert_int_eq(proc_wait(&p, WAIT_MS), 2);
    ck_assert_msg(strstr(proc_output(&p), "given --checkpoint shared.ckpt (a flag after --, DDP_WORKER_CHECKPOINT"),
                  "%s", proc_output_tail(&p));
    proc_close(&p);
}
END_TEST

/* --transports: each mode over each data plane, side by side, in the report; the same
 * training (the same loss) whatever carries it. Without --transports, --transport after --
 * is the worker's own. */
START_TEST(test_transports_side_by_side) {
    char out[128];
    snprintf(out, sizeof(out), "%s/out", dir);
    const char *argv[] = {DDP_COMPARE_PATH, "-n",      "2",       "--modes",   "ddp,dp", "--transports",
                          "shm,zmq",        "--steps", "3",       "--out",     out,      "--",
                          "--data",         dir,       "--model", "784-32-10", NULL};
    proc p;
    proc_start(&p, argv, NULL);
    int code = proc_wait(&p, WAIT_MS);
    ck_assert_msg(code == 0, "exit %d: %s", code, proc_output_tail(&p));
    proc_close(&p);
    char path[256];
    snprintf(path, sizeof(path), "%s/report.json", out);
    char *text = report_read_file(path);
    report_check_json(text);
    cJSON *report = cJSON_Parse(text);
    const cJSON *runs = cJSON_GetObjectItem(report, "modes");
    ck_assert_int_eq(cJSON_GetArraySize(runs), 4);
    static const char *const expected[4][2] = {{"ddp", "shm"}, {"ddp", "zmq"}, {"dp", "shm"}, {"dp", "zmq"}};
    for (int i = 0; i < 4; i++) {
        const cJSON *run = cJSON_GetArrayItem(runs, i);
        ck_assert_str_eq(cJSON_GetObjectItem(run, "mode")->valuestring, expected[i][0]);
        ck_assert_str_eq(cJSON_GetObjectItem(run, "transport")->valuestring, expected[i][1]);
        ck_assert_msg(cJSON_GetObjectItem(run, "final_loss")->valuedouble ==
                          cJSON_GetObjectItem(cJSON_GetArrayItem(runs, 0), "final_loss")->valuedouble,
                      "%s over %s trained otherwise", expected[i][0], expected[i][1]);
    }
    cJSON_Delete(report);
    free(text);

    /* one transport for every run, the worker's flag */
    const char *one[] = {DDP_COMPARE_PATH, "-n",  "2",  "--modes", "ddp", "--steps", "2",
                         "--out",          out,   "--", "--data",  dir,   "--model", "784-10",
                         "--transport",    "zmq", NULL};
    proc_start(&p, one, NULL);
    code = proc_wait(&p, WAIT_MS);
    ck_assert_msg(code == 0, "exit %d: %s", code, proc_output_tail(&p));
    ck_assert_msg(strstr(proc_output(&p), "| ddp | zmq |"), "%s", proc_output_tail(&p));
    proc_close(&p);
}
END_TEST

/* A report that cannot be replaced (a link to a device) is an error naming the file, before
 * any run, not "wrote ...". */
START_TEST(test_unwritable_report) {
    char out[128], link[192];
    snprintf(out, sizeof(out), "%s/out", dir);
    mkdir(out, 0755);
    snprintf(link, sizeof(link), "%s/report.json", out);
    ck_assert_int_eq(symlink("/dev/full", link), 0);
    const char *argv[] = {DDP_COMPARE_PATH, "-n", "1",       "--modes", "ddp", "--steps", "2", "--out", out, "--",
                          "--data",         dir,  "--model", "784-10",  NULL};
    proc p;
    proc_start(&p, argv, NULL);
    ck_assert_int_eq(proc_wait(&p, WAIT_MS), 2);
    ck_assert_msg(strstr(proc_output(&p), "report.json") && strstr(proc_output(&p), "not a regular file"), "%s",
                  proc_output_tail(&p));
    ck_assert_msg(!strstr(proc_output(&p), "wrote ") && !strstr(proc_output(&p), " mode"), "%s", proc_output_tail(&p));
    proc_close(&p);
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("compare");
    TCase *tc = tcase_create("compare");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 150); /* under CTest's 180 s (tests/CMakeLists.txt) */
    tcase_add_test(tc, test_compare_mlp_on_four);
    tcase_add_test(tc, test_bad_flags);
    tcase_add_test(tc, test_transports_side_by_side);
    tcase_add_test(tc, test_unwritable_report);
    suite_add_tcase(s, tc);
    return check_main(s, argc, argv);
}
