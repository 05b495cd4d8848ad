/* common/config.c: one table, read from defaults, an INI file, the environment and flags. */
#include <check.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/config.h"
#include "tests/check_main.h"

typedef struct {
    char *listen;
    char *config;
    int heartbeat_ms;
    double ratio;
    char *level;
    bool json;
} test_options;

static const char *const levels[] = {"error", "info", NULL};

static const config_option table[] = {
    {"listen", CONFIG_STRING, 1, 32, "tcp://127.0.0.1:29500", offsetof(test_options, listen), "endpoint", "EP"},
    {"config", CONFIG_STRING, 1, 4096, NULL, offsetof(test_options, config), "config file", "FILE"},
    {"heartbeat-ms", CONFIG_INT, 10, 60000, "500", offsetof(test_options, heartbeat_ms), "interval", "MS", NULL, NULL,
     'b'},
    {"ratio", CONFIG_DOUBLE, 0.0, 1.0, "0.5", offsetof(test_options, ratio), "a fraction", "X"},
    {"level", CONFIG_STRING, 1, 8, "info", offsetof(test_options, level), "log level", "LEVEL", levels},
    {"json", CONFIG_BOOL, 0, 1, NULL, offsetof(test_options, json), "JSON output"},
};

static const config_spec spec = {
    .program = "testd",
    .usage = "[OPTIONS]",
    .summary = "a test program",
    .env_prefix = "TESTD_",
    .options = table,
    .n_options = sizeof(table) / sizeof(table[0]),
};

static char err[512];
static test_options o;

/* Loads argv (NULL-terminated, without the program name). */
static int load(const char *const *args, int *ret_optind) {
    char *argv[32] = {(char *)"testd"};
    int argc = 1;
    for (; args && args[argc - 1]; argc++)
        argv[argc] = (char *)args[argc - 1];
    config_free(&spec, &o);
    memset(&o, 0, sizeof(o));
    err[0] = '\0';
    return config_load(&spec, &o, argc, argv, ret_optind, err, sizeof(err));
}

static char ini_path[64];

static void write_ini(const char *text) {
    snprintf(ini_path, sizeof(ini_path), "/tmp/check_config_%d.ini", (int)getpid());
    FILE *f = fopen(ini_path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static void teardown(void) {
    config_free(&spec, &o);
    unsetenv("TESTD_HEARTBEAT_MS");
    unsetenv("TESTD_BOGUS");
    unsetenv("TESTD_CONFIG");
    if (ini_path[0])
        unlink(ini_path);
}

START_TEST(test_defaults) {
    ck_assert_int_eq(load(NULL, NULL), 0);
    ck_assert_str_eq(o.listen, "tcp://127.0.0.1:29500");
    ck_assert_ptr_null(o.config);
    ck_assert_int_eq(o.heartbeat_ms, 500);
    ck_assert_double_eq(o.ratio, 0.5);
    ck_assert_str_eq(o.level, "info");
    ck_assert(!o.json);
}
END_TEST

START_TEST(test_flags) {
    const char *args[] = {"--listen", "ipc://x", "-b", "20", "--ratio=0.25", "--json", "--level", "error", NULL};
    int first = 0;
    ck_assert_msg(load(args, &first) == 0, "%s", err);
    ck_assert_str_eq(o.listen, "ipc://x");
    ck_assert_int_eq(o.heartbeat_ms, 20);
    ck_assert_double_eq(o.ratio, 0.25);
    ck_assert(o.json);
    ck_assert_str_eq(o.level, "error");
    ck_assert_int_eq(first, 9);
}
END_TEST

START_TEST(test_operands_after_double_dash) {
    const char *args[] = {"status", "--json", "--", "prog", "--heartbeat-ms", "1", NULL};
    int first = 0;
    ck_assert_int_eq(load(args, &first), 0);
    ck_assert(o.json);
    ck_assert_int_eq(o.heartbeat_ms, 500); /* after "--" it belongs to the operand */
    ck_assert_int_eq(first, 3);
}
END_TEST

START_TEST(test_file_env_flag_precedence) {
    write_ini("# comment\nheartbeat-ms = 100\n[testd]\nratio = 0.75\nlisten = tcp://file\n");
    setenv("TESTD_HEARTBEAT_MS", "200", 1);
    const char *args[] = {"--config", ini_path, "--listen", "tcp://flag", NULL};
    ck_assert_int_eq(load(args, NULL), 0);
    ck_assert_int_eq(o.heartbeat_ms, 200);    /* environment beats file */
    ck_assert_double_eq(o.ratio, 0.75);       /* file beats default */
    ck_assert_str_eq(o.listen, "tcp://flag"); /* flag beats file */
    ck_assert_str_eq(o.config, ini_path);

    const char *flag_wins[] = {"--config", ini_path, "--heartbeat-ms", "300", NULL};
    ck_assert_int_eq(load(flag_wins, NULL), 0);
    ck_assert_int_eq(o.heartbeat_ms, 300);

    setenv("TESTD_CONFIG", ini_path, 1); /* the file may come from the environment too */
    unsetenv("TESTD_HEARTBEAT_MS");
    ck_assert_int_eq(load(NULL, NULL), 0);
    ck_assert_int_eq(o.heartbeat_ms, 100);
}
END_TEST

START_TEST(test_underscore_keys) {
    write_ini("heartbeat_ms=42\n");
    const char *args[] = {"--config", ini_path, NULL};
    ck_assert_int_eq(load(args, NULL), 0);
    ck_assert_int_eq(o.heartbeat_ms, 42);
}
END_TEST

START_TEST(test_help_text) {
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    config_print_help(&spec, f);
    fclose(f);
    ck_assert_msg(strstr(text, "-b, --heartbeat-ms MS"), "%s", text);
    ck_assert(strstr(text, "(default 500)"));
    ck_assert(strstr(text, "[$TESTD_HEARTBEAT_MS]"));
    free(text);
}
END_TEST

/* Every bad input is refused with a message naming the key and where it came from. */
static const struct {
    const char *args[4];
    const char *ini;    /* when set, written and passed with --config */
    const char *env[2]; /* NAME, VALUE */
    const char *expected;
} bad_inputs[] = {
    {{"--heartbeat-ms", "5"}, NULL, {NULL}, "--heartbeat-ms: 5 is out of range [10, 60000]"},
    {{"--heartbeat-ms", "60001"}, NULL, {NULL}, "--heartbeat-ms: 60001 is out of range"},
    {{"--heartbeat-ms", "12abc"}, NULL, {NULL}, "--heartbeat-ms: '12abc' is not an integer"},
    {{"--heartbeat-ms", ""}, NULL, {NULL}, "--heartbeat-ms: '' is not an integer"},
    {{"--heartbeat-ms", "99999999999999999999"}, NULL, {NULL}, "is not an integer"},
    {{"--ratio", "1.5"}, NULL, {NULL}, "--ratio: 1.5 is out of range [0, 1]"},
    {{"--ratio", "nan"}, NULL, {NULL}, "--ratio: 'nan' is not a number"},
    {{"--level", "loud"}, NULL, {NULL}, "--level: 'loud' is not one of error info"},
    {{"--listen", "tcp://this-is-longer-than-thirty-two-bytes"}, NULL, {NULL}, "--listen: a value of 42 bytes"},
    {{"--nope"}, NULL, {NULL}, "unknown option '--nope'"},
    {{"-z"}, NULL, {NULL}, "unknown option '-z'"},
    {{"--listen"}, NULL, {NULL}, "option '--listen' needs a value"},
    {{NULL}, "bogus = 1\n", {NULL}, ":1: unknown key 'bogus'"},
    {{NULL}, "\n\nheartbeat-ms = 1\n", {NULL}, ":3: heartbeat-ms: 1 is out of range"},
    {{NULL}, "[other]\nratio = 0.1\n", {NULL}, ":2: unknown section [other]"},
    {{NULL}, "config = /etc/x\n", {NULL}, ":1: unknown key 'config'"},
    {{NULL}, "this is not ini\n", {NULL}, ":1: syntax error"},
    /* a key given twice, however spelt or wherever; an indented line is inih's continuation of
     * the key above it, which arrives as that key again */
    {{NULL}, "ratio = 0.5\nratio = 0.25\n", {NULL}, ":2: ratio: set a second time"},
    {{NULL}, "heartbeat_ms = 100\n[testd]\nheartbeat-ms = 200\n", {NULL}, ":3: heartbeat-ms: set a second time"},
    {{NULL}, "level = info\n  error\n", {NULL}, ":2: level: set a second time"},
    {{NULL}, NULL, {"TESTD_HEARTBEAT_MS", "1"}, "environment TESTD_HEARTBEAT_MS: 1 is out of range"},
    {{NULL}, NULL, {"TESTD_BOGUS", "1"}, "environment: unknown variable TESTD_BOGUS"},
    {{"--config", "/nonexistent/testd.conf"}, NULL, {NULL}, "/nonexistent/testd.conf: cannot open config file"},
};

START_TEST(test_bad_input) {
    const char *args[8] = {NULL};
    size_t n = 0;
    for (size_t k = 0; bad_inputs[_i].args[k]; k++)
        args[n++] = bad_inputs[_i].args[k];
    if (bad_inputs[_i].ini) {
        write_ini(bad_inputs[_i].ini);
        args[n++] = "--config";
        args[n++] = ini_path;
    }
    if (bad_inputs[_i].env[0])
        setenv(bad_inputs[_i].env[0], bad_inputs[_i].env[1], 1);
    int expected_code = strstr(bad_inputs[_i].expected, "cannot open") ? -ENOENT : -EINVAL;
    ck_assert_int_eq(load(args, NULL), expected_code);
    ck_assert_msg(strstr(err, bad_inputs[_i].expected), "case %d: expected '%s' in '%s'", _i, bad_inputs[_i].expected,
                  err);
}
END_TEST

/* A config file must be a regular text file: a device, a FIFO or a directory is refused at
 * once (not read forever, waited on, or taken as empty), and so is a NUL byte. Comments may
 * be of any length, after a value too; other lines say when they are over inih's limit. */
START_TEST(test_config_files) {
    const char *args[3] = {"--config", NULL, NULL};
    args[1] = "/dev/zero";
    ck_assert_int_eq(load(args, NULL), -EINVAL);
    ck_assert_msg(strstr(err, "/dev/zero: not a regular file"), "%s", err);
    args[1] = "/tmp";
    ck_assert_int_eq(load(args, NULL), -EISDIR);
    ck_assert_msg(strstr(err, "/tmp: a directory"), "%s", err);
    char fifo[64];
    snprintf(fifo, sizeof(fifo), "/tmp/check_config_fifo_%d", (int)getpid());
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    args[1] = fifo;
    ck_assert_int_eq(load(args, NULL), -EINVAL);
    ck_assert_msg(strstr(err, "not a regular file"), "%s", err);
    unlink(fifo);

    args[1] = ini_path;
    char text[1024];
    memset(text, 'x', sizeof(text));
    /* a 300-character comment, a trailing comment, then a value */
    snprintf(text, sizeof(text), "# %.300s\nheartbeat-ms = 700   # milliseconds\n; %.250s\nlevel = error ;why\n",
             "comment comment comment comment comment comment comment comment comment comment comment comment "
             "comment comment comment comment comment comment comment comment comment comment comment comment "
             "comment comment comment comment comment comment comment comment comment comment comment comment",
             "another long comment, well over the two hundred bytes of inih's line buffer, to be sure that it is "
             "read as one comment and not as two lines, the second of which would be a syntax error or worse");
    write_ini(text);
    ck_assert_msg(load(args, NULL) == 0, "%s", err);
    ck_assert_int_eq(o.heartbeat_ms, 700);
    ck_assert_str_eq(o.level, "error");
    /* a value line over the limit */
    char line[300];
    memset(line, 'a', sizeof(line));
    snprintf(text, sizeof(text), "ratio = 0.5\nlisten = %.250s\n", line);
    write_ini(text);
    ck_assert_int_eq(load(args, NULL), -EINVAL);
    ck_assert_msg(strstr(err, ":2: the line is longer than 198 characters"), "%s", err);
    /* a NUL byte */
    FILE *f = fopen(ini_path, "wb");
    fwrite("ratio = 0.5\n\0\n", 1, 15, f);
    fclose(f);
    ck_assert_int_eq(load(args, NULL), -EINVAL);
    ck_assert_msg(strstr(err, "a NUL byte"), "%s", err);
    /* no newline at the end is still a line */
    write_ini("ratio = 0.25");
    ck_assert_msg(load(args, NULL) == 0, "%s", err);
    ck_assert_double_eq(o.ratio, 0.25);
}
END_TEST

/* A config file whose path is longer than the error buffer: the error is cut short, never
 * read past; with room, it names the path whole, the line and the key. */
START_TEST(test_long_config_path) {
    char dir[1024], path[1100], seg[201];
    memset(seg, 'd', 200);
    seg[200] = '\0';
    int n = snprintf(dir, sizeof(dir), "/tmp/check_config_long_%d", (int)getpid());
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    for (int k = 0; k < 3; k++) {
        n += snprintf(dir + n, sizeof(dir) - (size_t)n, "/%s", seg);
        ck_assert_int_eq(mkdir(dir, 0700), 0);
    }
    snprintf(path, sizeof(path), "%s/testd.ini", dir);
    ck_assert_uint_gt(strlen(path), 600);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("ratio = 0.5\nbogus = 1\n", f);
    fclose(f);
    memset(&o, 0, sizeof(o));
    char small[512], large[2048], want[2048];
    ck_assert_int_eq(config_read_file(&spec, &o, path, small, sizeof(small)), -EINVAL);
    ck_assert_uint_eq(strlen(small), sizeof(small) - 1);
    ck_assert_int_eq(strncmp(small, path, sizeof(small) - 1), 0);
    ck_assert_int_eq(config_read_file(&spec, &o, path, large, sizeof(large)), -EINVAL);
    snprintf(want, sizeof(want), "%s:2: unknown key 'bogus'", path);
    ck_assert_str_eq(large, want);
    ck_assert_int_eq(config_read_file(&spec, &o, path, large, sizeof(large)), -EINVAL); /* and a bad value */
    f = fopen(path, "w");
    fputs("heartbeat-ms = 5\n", f);
    fclose(f);
    ck_assert_int_eq(config_read_file(&spec, &o, path, large, sizeof(large)), -EINVAL);
    snprintf(want, sizeof(want), "%s:1: heartbeat-ms: 5 is out of range [10, 60000]", path);
    ck_assert_str_eq(large, want);
    unlink(path);
    for (int k = 0; k < 4; k++) {
        rmdir(dir);
        *strrchr(dir, '/') = '\0';
    }
    config_free(&spec, &o);
}
END_TEST

START_TEST(test_config_set) {
    memset(&o, 0, sizeof(o));
    ck_assert_int_eq(config_set(&spec, &o, "heartbeat_ms", "77", "here", err, sizeof(err)), 0);
    ck_assert_int_eq(o.heartbeat_ms, 77);
    ck_assert_int_eq(config_set(&spec, &o, "json", "yes", "here", err, sizeof(err)), 0);
    ck_assert(o.json);
    ck_assert_int_eq(config_set(&spec, &o, "json", "maybe", "here", err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "here: json: 'maybe' is not a boolean (true/false)");
    ck_assert_int_eq(config_set(&spec, &o, "colour", "red", "here", err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "here: unknown key 'colour'");
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("config");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits"), *bad = tcase_create("malformed");
    TCase *all[] = {core, limits, bad};
    for (int i = 0; i < 3; i++) {
        tcase_add_checked_fixture(all[i], NULL, teardown);
        tcase_set_timeout(all[i], 30);
        suite_add_tcase(s, all[i]);
    }
    tcase_add_test(core, test_defaults);
    tcase_add_test(core, test_flags);
    tcase_add_test(core, test_operands_after_double_dash);
    tcase_add_test(core, test_file_env_flag_precedence);
    tcase_add_test(core, test_underscore_keys);
    tcase_add_test(core, test_help_text);
    tcase_add_test(limits, test_config_set);
    tcase_add_test(bad, test_config_files);
    tcase_add_test(bad, test_long_config_path);
    tcase_add_loop_test(bad, test_bad_input, 0, (int)(sizeof(bad_inputs) / sizeof(bad_inputs[0])));
    return check_main(s, argc, argv);
}
