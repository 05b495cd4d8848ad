/* libddp's API at its edges, without a job: NULL handles, the version, ddp_options.size. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ddp/ddp.h"
#include "tests/check_main.h"

/* Every call on a NULL group is -EINVAL, none crashes. */
START_TEST(test_null_group) {
    ck_assert_int_eq(ddp_rank(NULL), -EINVAL);
    ck_assert_int_eq(ddp_world_size(NULL), -EINVAL);
    ck_assert_int_eq(ddp_local_rank(NULL), -EINVAL);
    ck_assert_int_eq(ddp_timeout_ms(NULL), -EINVAL);
    ck_assert_int_eq(ddp_barrier(NULL), -EINVAL);
    ck_assert_int_eq(ddp_abort(NULL, "why"), -EINVAL);
    ck_assert_int_eq(ddp_job_status(NULL), -EINVAL);
    ck_assert_int_eq(ddp_stop_requested(NULL), -EINVAL);
    ck_assert_int_eq(ddp_report_progress(NULL, 1, 1.0), -EINVAL);
    int x = 0;
    ck_assert_int_eq(ddp_all_reduce(NULL, &x, 1, DDP_I32, DDP_SUM), -EINVAL);
    ck_assert_int_eq(ddp_store_set(NULL, "k", "v", 1), -EINVAL);
    ck_assert_int_eq(ddp_ps_push(NULL, 0, NULL), -EINVAL);
    ck_assert_int_eq(ddp_ps_pull(NULL, 0, NULL), -EINVAL);
    ck_assert_ptr_null(ddp_ps_buffer(NULL, 0));
    ck_assert_ptr_null(ddp_ps_average(NULL, 0));
    ddp_stats st;
    ck_assert_int_eq(ddp_get_stats(NULL, &st), -EINVAL);
    double waited;
    ck_assert_int_eq(ddp_get_arrival_wait(NULL, &waited), -EINVAL);
    ck_assert_int_eq(ddp_wait(NULL), -EINVAL);
    ddp_finalize(NULL);
}
END_TEST

START_TEST(test_version) {
    ck_assert_int_eq(ddp_get_version(), DDP_VERSION_CODE);
    ck_assert_int_eq(DDP_VERSION_CODE, DDP_VERSION_MAJOR * 10000 + DDP_VERSION_MINOR * 100 + DDP_VERSION_PATCH);
}
END_TEST

START_TEST(test_options_init) {
    ddp_options a = DDP_OPTIONS_INIT, b;
    memset(&b, 0xff, sizeof(b));
    ddp_options_init(&b);
    ck_assert_uint_eq(a.size, sizeof(ddp_options));
    ck_assert_int_eq(memcmp(&a, &b, sizeof(a)), 0);
    ck_assert_int_eq(a.rank, -1);
    ck_assert_int_eq(a.local_rank, -1);
}
END_TEST

/* Options not started from DDP_OPTIONS_INIT (size 0), or from a newer header than the
 * library: refused before anything is contacted, saying why. */
START_TEST(test_options_size) {
    static const size_t sizes[] = {0, sizeof(ddp_options) - 1, sizeof(ddp_options) + 8};
    ddp_options o = DDP_OPTIONS_INIT;
    o.world_size = 1;
    o.coordinator = "tcp://127.0.0.1:1";
    o.size = sizes[_i];
    ddp_group *g = (ddp_group *)&o; /* untouched on failure */
    ck_assert_int_eq(ddp_init(&o, &g), -EINVAL);
    ck_assert_ptr_eq(g, (ddp_group *)&o);
    ck_assert_msg(strstr(ddp_last_error(NULL), "ddp_options.size") && strstr(ddp_last_error(NULL), "DDP_OPTIONS_INIT"),
                  "%s", ddp_last_error(NULL));
}
END_TEST

/* ddp_init with nowhere to put the group fails before it joins anything. */
START_TEST(test_init_without_ret) {
    ck_assert_int_eq(ddp_init(NULL, NULL), -EINVAL);
    ck_assert_msg(strstr(ddp_last_error(NULL), "ret_group is NULL"), "%s", ddp_last_error(NULL));
}
END_TEST

/* ddp_strerror's text is static: an unknown code's does not change under a later call. */
START_TEST(test_strerror) {
    const char *a = ddp_strerror(-4095);
    ck_assert_str_eq(a, "unknown error");
    ck_assert_str_eq(ddp_strerror(-4000), "unknown error");
    ck_assert_str_eq(a, "unknown error");
    ck_assert_str_eq(ddp_strerror(-ETIMEDOUT), "timed out");
    ck_assert_str_eq(ddp_strerror(-ENOTDIR), "Not a directory");
}
END_TEST

/* After ddp_interrupt (a signal handler's call) a ddp_init ends at once with -EINTR, here
 * where it would otherwise wait its 10 s for a coordinator that is not there. */
START_TEST(test_interrupt) {
    ck_assert_int_eq(ddp_interrupt(), 0);
    ddp_options o = DDP_OPTIONS_INIT;
    o.world_size = 2;
    o.coordinator = "tcp://127.0.0.1:1";
    ddp_group *g = NULL;
    ck_assert_int_eq(ddp_init(&o, &g), -EINTR);
    ck_assert_msg(strstr(ddp_last_error(NULL), "interrupted"), "%s", ddp_last_error(NULL));
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("api");
    TCase *core = tcase_create("core"), *bad = tcase_create("malformed");
    tcase_set_timeout(core, 30);
    tcase_set_timeout(bad, 30);
    tcase_add_test(core, test_version);
    tcase_add_test(core, test_options_init);
    tcase_add_test(core, test_strerror);
    tcase_add_test(core, test_interrupt);
    tcase_add_test(bad, test_init_without_ret);
    tcase_add_test(bad, test_null_group);
    tcase_add_loop_test(bad, test_options_size, 0, 3);
    suite_add_tcase(s, core);
    suite_add_tcase(s, bad);
    return check_main(s, argc, argv);
}
