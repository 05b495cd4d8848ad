/* ddp-compare's renderers on results made by hand: the table's cells, report.json against
 * the committed schema with every number in its place, report.svg as XML naming every
 * mode, and a stream that cannot take the report reported as an error. */
#include <cJSON.h>
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check_main.h"
#include "tests/compare/report_checks.h"
#include "worker/tools/compare_report.h"

static mode_result modes[3], sweep[2];

/* Two ranks in three modes: dp's rank 0 holds twice the memory; ps's busiest link is to ddpd. */
static void setup(void) {
    static const char *const names[] = {"dp", "ddp", "ps"};
    memset(modes, 0, sizeof(modes));
    memset(sweep, 0, sizeof(sweep));
    for (int i = 0; i < 3; i++) {
        mode_result *m = &modes[i];
        snprintf(m->mode, sizeof(m->mode), "%s", names[i]);
        snprintf(m->transport, sizeof(m->transport), "%s", i == 2 ? "zmq" : "shm");
        m->world = 2;
        m->steps = 100;
        m->samples_per_s = 1000.0 * (i + 1);
        m->seconds = 12.8 / (i + 1);
        m->loss = 0.5 + i;
        m->accuracy = 0.8125;
        for (int r = 0; r < 2; r++) {
            rank_result *x = &m->ranks[r];
            x->peak_tracked = (i == 0 && r == 0 ? 2 : 1) * 1048576.0;
            x->device_used = -1;
            x->peak_rss_kb = 20480;
            x->sent = 3 * 1048576.0;
            x->received = 1536;
            x->compute_s = 0.2;
            x->comm_s = 0.1;
            x->wait_s = 0.05;
            x->forward_s = 0.08;
            x->backward_s = 0.1;
            x->optimizer_s = i == 0 && r == 1 ? 0 : 0.02; /* dp: rank 0 alone steps */
        }
        m->imbalance = i == 0 ? 2 : 1;
        m->link_from = 1;
        m->link_to = i == 2 ? 2 : 0;
        m->link_bytes = 3 * 1048576.0;
    }
    for (int i = 0; i < 2; i++) {
        sweep[i] = modes[1];
        sweep[i].bucket_mb = i ? 25 : 0.25;
        sweep[i].samples_per_s = 1500 + i;
    }
}

static char *render(int (*write)(FILE *f, const compare_report *r), const compare_report *r) {
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(write(f, r), 0);
    ck_assert_int_eq(fclose(f), 0);
    return text;
}

START_TEST(test_table) {
    compare_report r = {.world = 2, .modes = modes, .n_modes = 3};
    char *t = render(compare_write_table, &r);
    ck_assert_msg(strstr(t, "| mode | transport | samples/s |"), "%s", t);
    /* per step and rank: 0.2 s compute over 100 steps is 2 ms */
    ck_assert_msg(strstr(t,
                         "| dp | shm | 1000 | 2.00 / 1.00 / 0.50 | 0.80 / 1.00 / 0.20, 0.80 / 1.00 / 0.00 | 2.0 MiB, "
                         "1.0 MiB | 2.00 | 20 MiB, 20 MiB |"),
                  "%s", t);
    ck_assert_msg(strstr(t, "| 3.0 MiB / 1.5 KiB, 3.0 MiB / 1.5 KiB | rank 1 -> rank 0: 3.0 MiB | 0.5000 | 0.8125 |"),
                  "%s", t);
    ck_assert_msg(strstr(t, "| ps | zmq | 3000 |") && strstr(t, "rank 1 -> ddpd: 3.0 MiB"), "%s", t);
    ck_assert_msg(!strstr(t, "bucket size"), "a sweep table without a sweep: %s", t);
    free(t);
    r.sweep = sweep;
    r.n_sweep = 2;
    t = render(compare_write_table, &r);
    ck_assert_msg(strstr(t, "| ddp bucket size (MiB) | samples/s |\n|---|---|\n| 0.25 | 1500 |\n| 25 | 1501 |\n"), "%s",
                  t);
    free(t);
    char *md = render(compare_write_markdown, &r);
    ck_assert_msg(strncmp(md, "# ddp-compare: 2 workers\n\n| mode |", 34) == 0, "%s", md);
    free(md);
}
END_TEST

START_TEST(test_gpu_memory) {
    modes[1].ranks[0].device_used = modes[1].ranks[1].device_used = 512 * 1048576.0;
    compare_report r = {.world = 2, .modes = modes, .n_modes = 3};
    char *t = render(compare_write_table, &r);
    ck_assert_msg(strstr(t, "1.0 MiB (GPU in use 512.0 MiB), 1.0 MiB (GPU in use 512.0 MiB)"), "%s", t);
    free(t);
    char *json = render(compare_write_json, &r);
    cJSON *j = cJSON_Parse(json);
    const cJSON *ddp = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "modes"), 1);
    const cJSON *rank0 = cJSON_GetArrayItem(cJSON_GetObjectItem(ddp, "ranks"), 0);
    ck_assert_double_eq(cJSON_GetObjectItem(rank0, "device_used_bytes")->valuedouble, 512 * 1048576.0);
    ck_assert_ptr_null(cJSON_GetObjectItem(
        cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "modes"), 0), "ranks"), 0),
        "device_used_bytes"));
    cJSON_Delete(j);
    free(json);
}
END_TEST

START_TEST(test_json) {
    compare_report r = {.world = 2, .modes = modes, .n_modes = 3, .sweep = sweep, .n_sweep = 2};
    char *text = render(compare_write_json, &r);
    report_check_json(text);
    cJSON *j = cJSON_Parse(text);
    ck_assert_int_eq(cJSON_GetObjectItem(j, "world")->valueint, 2);
    const cJSON *list = cJSON_GetObjectItem(j, "modes");
    ck_assert_int_eq(cJSON_GetArraySize(list), 3);
    const cJSON *dp = cJSON_GetArrayItem(list, 0), *ps = cJSON_GetArrayItem(list, 2);
    ck_assert_str_eq(cJSON_GetObjectItem(dp, "mode")->valuestring, "dp");
    ck_assert_str_eq(cJSON_GetObjectItem(dp, "transport")->valuestring, "shm");
    ck_assert_double_eq(cJSON_GetObjectItem(dp, "samples_per_s")->valuedouble, 1000);
    ck_assert_double_eq(cJSON_GetObjectItem(dp, "memory_imbalance")->valuedouble, 2);
    ck_assert_double_eq(cJSON_GetObjectItem(dp, "final_loss")->valuedouble, 0.5);
    const cJSON *rank0 = cJSON_GetArrayItem(cJSON_GetObjectItem(dp, "ranks"), 0);
    ck_assert_double_eq(cJSON_GetObjectItem(rank0, "peak_tracked_bytes")->valuedouble, 2 * 1048576.0);
    ck_assert_double_eq(cJSON_GetObjectItem(rank0, "comm_s")->valuedouble, 0.1);
    ck_assert_double_eq(cJSON_GetObjectItem(rank0, "optimizer_s")->valuedouble, 0.02);
    const cJSON *rank1 = cJSON_GetArrayItem(cJSON_GetObjectItem(dp, "ranks"), 1);
    ck_assert_double_eq(cJSON_GetObjectItem(rank1, "optimizer_s")->valuedouble, 0);
    const cJSON *link = cJSON_GetObjectItem(ps, "busiest_link");
    ck_assert_str_eq(cJSON_GetObjectItem(link, "to")->valuestring, "ddpd");
    ck_assert_int_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(dp, "busiest_link"), "to")->valueint, 0);
    const cJSON *swept = cJSON_GetObjectItem(j, "bucket_sweep");
    ck_assert_int_eq(cJSON_GetArraySize(swept), 2);
    ck_assert_double_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(swept, 1), "bucket_mb")->valuedouble, 25);
    cJSON_Delete(j);
    free(text);
    r.n_sweep = 0; /* no sweep: no key */
    text = render(compare_write_json, &r);
    j = cJSON_Parse(text);
    ck_assert_ptr_null(cJSON_GetObjectItem(j, "bucket_sweep"));
    cJSON_Delete(j);
    free(text);
}
END_TEST

START_TEST(test_svg) {
    compare_report r = {.world = 2, .modes = modes, .n_modes = 3};
    char *svg = render(compare_write_svg, &r);
    static const char *const names[] = {"dp", "ddp", "ps", "shm", "zmq"};
    report_check_svg(svg, names, 5);
    ck_assert_msg(strstr(svg, ">3000</text>") && strstr(svg, ">2.0</text>"), "the bars' values: %s", svg);
    free(svg);
}
END_TEST

/* Zero throughput and memory (a run too short to measure): the bars scale without dividing by zero. */
START_TEST(test_svg_of_zeros) {
    for (int i = 0; i < 3; i++) {
        modes[i].samples_per_s = 0;
        for (int k = 0; k < 2; k++)
            modes[i].ranks[k].peak_tracked = 0;
    }
    compare_report r = {.world = 2, .modes = modes, .n_modes = 3};
    char *svg = render(compare_write_svg, &r);
    ck_assert_msg(!strstr(svg, "nan") && !strstr(svg, "inf"), "%s", svg);
    free(svg);
}
END_TEST

/* A stream that fails (a full disk) is an error, not a report. */
START_TEST(test_write_error) {
    compare_report r = {.world = 2, .modes = modes, .n_modes = 3};
    int (*const writers[])(FILE *, const compare_report *) = {compare_write_table, compare_write_markdown,
                                                              compare_write_json, compare_write_svg};
    for (size_t i = 0; i < sizeof(writers) / sizeof(writers[0]); i++) {
        FILE *f = fopen("/dev/full", "w");
        ck_assert_ptr_nonnull(f);
        setvbuf(f, NULL, _IONBF, 0);
        ck_assert_int_eq(writers[i](f, &r), -EIO);
        fclose(f);
    }
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("compare_report");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits"), *bad = tcase_create("malformed");
    TCase *all[] = {core, limits, bad};
    for (int i = 0; i < 3; i++) {
        tcase_add_checked_fixture(all[i], setup, NULL);
        tcase_set_timeout(all[i], 30);
        suite_add_tcase(s, all[i]);
    }
    tcase_add_test(core, test_table);
    tcase_add_test(core, test_json);
    tcase_add_test(core, test_svg);
    tcase_add_test(core, test_gpu_memory);
    tcase_add_test(limits, test_svg_of_zeros);
    tcase_add_test(bad, test_write_error);
    return check_main(s, argc, argv);
}
