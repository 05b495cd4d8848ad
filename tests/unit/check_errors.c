/* common/error.c and common/log.c: what a person reads when something goes wrong. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/log.h"
#include "tests/check_main.h"

static const int project_codes[] = {ETIMEDOUT, ECONNABORTED, ECONNREFUSED, EHOSTUNREACH, EPROTO,  EBADMSG,
                                    EMSGSIZE,  EPROTONOSUPPORT, EEXIST,   EBUSY,        ESHUTDOWN, EPIPE,
                                    ENOSPC,    EINVAL,       ENOMEM,       ENOENT};

START_TEST(test_every_code_has_its_own_text) {
    size_t n = sizeof(project_codes) / sizeof(project_codes[0]);
    for (size_t i = 0; i < n; i++) {
        const char *a = error_string(-project_codes[i]);
        ck_assert_ptr_nonnull(a);
        ck_assert_int_gt(strlen(a), 3);
        for (size_t k = 0; k < i; k++)
            ck_assert_msg(strcmp(a, error_string(-project_codes[k])) != 0, "%d and %d read the same", project_codes[i],
                          project_codes[k]);
    }
    ck_assert_str_eq(error_string(-ECONNABORTED), "job aborted: a member died or the job was stopped");
    ck_assert_str_eq(error_string(-EHOSTUNREACH), "no coordinator answered");
}
END_TEST

START_TEST(test_edge_codes) {
    ck_assert_str_eq(error_string(0), "success");
    ck_assert_str_eq(error_string(5), "invalid error code (errors are negative)");
    ck_assert_str_eq(error_string(-ENOTDIR), strerror(ENOTDIR)); /* others fall back to libc */
    ck_assert_ptr_nonnull(error_string(-99999));
    ck_assert_ptr_nonnull(error_string(-2147483647));
}
END_TEST

static int fails_with(int r) {
    TRY(r);
    return 42;
}

START_TEST(test_try_propagates) {
    ck_assert_int_eq(fails_with(-EPIPE), -EPIPE);
    ck_assert_int_eq(fails_with(0), 42);
    ck_assert_int_eq(fails_with(7), 42); /* counts are not errors */
}
END_TEST

/* Runs fn with stderr captured; returns what it wrote (static). */
static const char *captured(void (*fn)(void)) {
    static char buf[8192];
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    int saved = dup(STDERR_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[1]);
    fn();
    dup2(saved, STDERR_FILENO);
    close(saved);
    ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
    close(fds[0]);
    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

static void log_some(void) {
    log_set_prefix("rank 3");
    log_set_level(LOG_LEVEL_INFO);
    log_info("joined job '%s'", "x");
    log_debug("not shown");
    log_warn("peer said \"%s\"", "two\nlines");
}

START_TEST(test_log_lines) {
    unsetenv("JOURNAL_STREAM");
    const char *out = captured(log_some);
    ck_assert_str_eq(out, "rank 3: info: joined job 'x'\nrank 3: warn: peer said \"two lines\"\n");
    setenv("JOURNAL_STREAM", "8:1234", 1);
    out = captured(log_some);
    ck_assert_str_eq(out, "<6>rank 3: joined job 'x'\n<4>rank 3: peer said \"two lines\"\n");
    unsetenv("JOURNAL_STREAM");
}
END_TEST

static void log_flood(void) {
    log_set_prefix("ddpd");
    log_ratelimit rl = LOG_RATELIMIT_INIT(60000, 3);
    for (int i = 0; i < 100; i++)
        log_ratelimited(&rl, LOG_LEVEL_WARN, "bad message %d", i);
    rl.window_start_ms -= 60000; /* the window is over: the next line reports what was held back */
    log_ratelimited(&rl, LOG_LEVEL_WARN, "bad message %d", 100);
}

START_TEST(test_log_ratelimit) {
    const char *out = captured(log_flood);
    ck_assert_str_eq(out, "ddpd: warn: bad message 0\nddpd: warn: bad message 1\nddpd: warn: bad message 2\n"
                          "ddpd: warn: (97 similar messages suppressed)\nddpd: warn: bad message 100\n");
}
END_TEST

START_TEST(test_log_levels) {
    log_level l;
    ck_assert_int_eq(log_level_from_string("debug", &l), 0);
    ck_assert_int_eq(l, LOG_LEVEL_DEBUG);
    ck_assert_int_eq(log_level_from_string("verbose", &l), -EINVAL);
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("errors");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    tcase_add_test(core, test_every_code_has_its_own_text);
    tcase_add_test(core, test_try_propagates);
    tcase_add_test(core, test_log_lines);
    tcase_add_test(core, test_log_levels);
    tcase_add_test(limits, test_edge_codes);
    tcase_add_test(limits, test_log_ratelimit);
    suite_add_tcase(s, core);
    suite_add_tcase(s, limits);
    return check_main(s, argc, argv);
}
