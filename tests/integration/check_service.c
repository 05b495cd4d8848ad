/* ddpd as a systemd service: sd_notify's messages in order (READY, STATUS, WATCHDOG,
 * STOPPING), the Prometheus metrics file and ddpctl metrics, and ddpctl abort. */
#include <check.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/data_plane.h"
#include "tests/check_main.h"
#include "tests/integration/harness.h"

#define WAIT_MS 20000

/* A datagram socket where ddpd's sd_notify messages land, as systemd's would. */
static int notify_socket(char *path, size_t size) {
    snprintf(path, size, "/tmp/check_service_%d.sock", (int)getpid());
    unlink(path);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%.100s", path);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

/* The next message that contains needle, within WAIT_MS; earlier ones are collected. */
static bool next_notification(int fd, const char *needle, char *seen, size_t seen_size) {
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, WAIT_MS) <= 0)
            return false;
        char buf[512];
        ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
        if (n <= 0)
            return false;
        buf[n] = '\0';
        size_t len = strlen(seen);
        snprintf(seen + len, seen_size - len, "%s|", buf);
        if (strstr(buf, needle))
            return true;
    }
}

/* Every line is a comment (# HELP / # TYPE) or a sample: name{labels} value. */
static void expect_prometheus(const char *text) {
    char *copy = strdup(text), *save = NULL;
    int samples = 0;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#') {
            ck_assert_msg(!strncmp(line, "# HELP ddpd_", 12) || !strncmp(line, "# TYPE ddpd_", 12), "bad comment: %s",
                          line);
            continue;
        }
        const char *p = line;
        ck_assert_msg((*p >= 'a' && *p <= 'z') || *p == '_', "bad metric name: %s", line);
        while ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == ':')
            p++;
        if (*p == '{') {
            for (p++; *p != '}';) {
                while ((*p >= 'a' && *p <= 'z') || *p == '_')
                    p++;
                ck_assert_msg(p[0] == '=' && p[1] == '"', "bad label: %s", line);
                for (p += 2; *p && *p != '"'; p++)
                    if (*p == '\\')
                        p++;
                ck_assert_msg(*p == '"', "unterminated label: %s", line);
                p++;
                if (*p == ',')
                    p++;
            }
            p++;
        }
        ck_assert_msg(*p == ' ', "no value: %s", line);
        char *end;
        strtod(p + 1, &end);
        ck_assert_msg(end > p + 1 && *end == '\0', "bad value: %s", line);
        samples++;
    }
    ck_assert_int_gt(samples, 3);
    free(copy);
}

/* A group other than this process's own that it may give a file to: as root, any (the
 * first other in the group database); else one of its supplementary groups. -1: none. */
static gid_t other_group(char *name, size_t size) {
    gid_t found = (gid_t)-1, mine = getegid();
    if (geteuid() == 0) {
        setgrent();
        for (struct group *g; found == (gid_t)-1 && (g = getgrent());)
            if (g->gr_gid != mine)
                found = g->gr_gid;
        endgrent();
    } else {
        gid_t groups[64];
        int n = getgroups(64, groups);
        for (int i = 0; i < n && found == (gid_t)-1; i++)
            if (groups[i] != mine)
                found = groups[i];
    }
    struct group *g = found != (gid_t)-1 ? getgrgid(found) : NULL;
    if (!g)
        return (gid_t)-1;
    snprintf(name, size, "%s", g->gr_name);
    return found;
}

START_TEST(test_notify_and_metrics) {
    char path[128], env_socket[160], metrics[128], seen[8192] = "";
    int fd = notify_socket(path, sizeof(path));
    snprintf(env_socket, sizeof(env_socket), "NOTIFY_SOCKET=%s", path);
    snprintf(metrics, sizeof(metrics), "/tmp/check_service_%d.prom", (int)getpid());
    const char *env[] = {env_socket, "WATCHDOG_USEC=200000", NULL};
    /* under the unit's UMask=0077, as systemd runs it */
    char readers[64];
    gid_t readers_gid = other_group(readers, sizeof(readers)); /* -1: the file keeps ddpd's group */
    const char *argv[] = {"/bin/sh",        "-c",       "umask 077 && exec \"$0\" \"$@\"",
                          DDPD_PATH,        "--listen", "tcp://127.0.0.1:*",
                          "--metrics-file", metrics,    readers_gid != (gid_t)-1 ? "--metrics-group" : NULL,
                          readers,          NULL};
    ddpd_proc d;
    proc_start(&d.p, argv, env);
    ck_assert_msg(proc_expect(&d.p, "listening on ", WAIT_MS, NULL, 0), "%s", proc_output_tail(&d.p));
    char line[512];
    d.p.cursor = 0;
    proc_expect(&d.p, "listening on ", 0, line, sizeof(line));
    sscanf(strstr(line, "listening on ") + 13, "%256s", d.endpoint);

    ck_assert_msg(next_notification(fd, "READY=1", seen, sizeof(seen)), "no READY: %s", seen);
    ck_assert_msg(strstr(seen, "STATUS=0 jobs, 0 workers"), "%s", seen);
    ck_assert_msg(!strstr(seen, "WATCHDOG=1|") || strstr(seen, "READY=1") < strstr(seen, "WATCHDOG=1|"),
                  "a ping came before READY: %s", seen);
    ck_assert_msg(next_notification(fd, "WATCHDOG=1", seen, sizeof(seen)), "no WATCHDOG: %s", seen);

    proc m;
    member_start(&m, &d, 2, 0, "svc", NULL);
    ck_assert_msg(next_notification(fd, "STATUS=1 job, 1 worker", seen, sizeof(seen)), "no STATUS change: %s", seen);

    /* the metrics file, written every second on a thread of ddpd's, and ddpctl metrics */
    FILE *f = NULL;
    for (uint64_t until = clock_now_ms() + WAIT_MS; !(f = fopen(metrics, "r")) && clock_now_ms() < until;)
        usleep(20 * 1000);
    ck_assert_msg(f, "no %s", metrics);
    struct stat st; /* --metrics-group's (node_exporter reads it as a member), not every user's */
    ck_assert_int_eq(fstat(fileno(f), &st), 0);
    ck_assert_msg((st.st_mode & 0777) == 0640, "%s is %o under umask 077, not 640", metrics, st.st_mode & 0777);
    ck_assert_msg(st.st_gid == (readers_gid != (gid_t)-1 ? readers_gid : getegid()), "%s has group %u, not %s's",
                  metrics, (unsigned)st.st_gid, readers_gid != (gid_t)-1 ? readers : "ddpd");
    char text[8192];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    text[n] = '\0';
    fclose(f);
    expect_prometheus(text);
    const char *ctl[] = {DDPCTL_PATH, "--coordinator", d.endpoint, "metrics", NULL};
    proc c;
    proc_start(&c, ctl, NULL);
    int code = proc_wait(&c, WAIT_MS);
    ck_assert_msg(code == 0, "ddpctl metrics exited %d: %s", code, proc_output_tail(&c));
    expect_prometheus(proc_output(&c));
    ck_assert_msg(strstr(proc_output(&c), "ddpd_job_members{job=\"svc\",owner=\"\",state=\"forming\",mode=\"\"} 1"),
                  "%s", proc_output_tail(&c));
    /* the same counters both ways (the file had two that ddpctl lacked) */
    static const char *const counters[] = {"ddpd_up 1", "ddpd_bad_messages_total 0", "ddpd_job_aborts_total 0"};
    for (int i = 0; i < 3; i++)
        ck_assert_msg(strstr(proc_output(&c), counters[i]) && strstr(text, counters[i]), "%s in both:\n%s\n%s",
                      counters[i], proc_output(&c), text);
    proc_close(&c);

    /* ddpctl abort: the forming job's member hears who ended it */
    const char *abort_argv[] = {DDPCTL_PATH, "--coordinator", d.endpoint, "abort", "svc", NULL};
    proc_start(&c, abort_argv, NULL);
    ck_assert_int_eq(proc_wait(&c, WAIT_MS), 0);
    ck_assert(strstr(proc_output(&c), "job 'svc' aborted"));
    proc_close(&c);
    ck_assert_msg(proc_expect(&m, "aborted by an operator: ddpctl abort (pid", WAIT_MS, NULL, 0), "%s",
                  proc_output_tail(&m));
    ck_assert_int_eq(proc_wait(&m, WAIT_MS), 2);
    proc_close(&m);
    const char *missing[] = {DDPCTL_PATH, "--coordinator", d.endpoint, "abort", "nope", NULL};
    proc_start(&c, missing, NULL);
    ck_assert_int_eq(proc_wait(&c, WAIT_MS), 1);
    ck_assert(strstr(proc_output(&c), "no job 'nope'"));
    proc_close(&c);

    /* STOPPING last */
    proc_signal(&d.p, SIGTERM);
    ck_assert_msg(next_notification(fd, "STOPPING=1", seen, sizeof(seen)), "no STOPPING: %s", seen);
    ck_assert_int_eq(proc_wait(&d.p, WAIT_MS), 0);
    proc_close(&d.p);
    /* the file outlives ddpd, and says it is down */
    f = fopen(metrics, "r");
    ck_assert_msg(f, "no %s", metrics);
    n = fread(text, 1, sizeof(text) - 1, f);
    text[n] = '\0';
    fclose(f);
    ck_assert_msg(strstr(text, "ddpd_up 0") && !strstr(text, "ddpd_up 1"), "%s", text);
    close(fd);
    unlink(path);
    unlink(metrics);
}
END_TEST

/* The metrics file on a disk that takes 4 s for each fsync (two a write): ddpd's loop goes
 * on (a status with a 2 s timeout is answered, again and again: the loop waited 8 s a
 * second before), and a stop waits 5 s at most for the last write, saying so. */
START_TEST(test_metrics_on_a_slow_disk) {
    char metrics[128];
    snprintf(metrics, sizeof(metrics), "/tmp/check_service_slow_%d.prom", (int)getpid());
    const char *asan = getenv("ASAN_OPTIONS");
    char asan_env[512]; /* the preloaded library comes before the sanitizer's runtime */
    snprintf(asan_env, sizeof(asan_env), "ASAN_OPTIONS=%s%sverify_asan_link_order=0", asan ? asan : "",
             asan && asan[0] ? ":" : "");
    const char *env[] = {"LD_PRELOAD=" SLOW_CALLS_PATH, "DDP_TEST_FSYNC_DELAY_MS=4000", asan_env, NULL};
    const char *argv[] = {DDPD_PATH, "--listen", "tcp://127.0.0.1:*", "--metrics-file", metrics, NULL};
    ddpd_proc d;
    proc_start(&d.p, argv, env);
    char line[512];
    ck_assert_msg(proc_expect(&d.p, "listening on ", WAIT_MS, line, sizeof(line)), "%s", proc_output_tail(&d.p));
    sscanf(strstr(line, "listening on ") + 13, "%256s", d.endpoint);
    const char *status[] = {DDPCTL_PATH, "--coordinator", d.endpoint, "--timeout-ms", "2000", "status", NULL};
    for (int i = 0; i < 3; i++) {
        proc c;
        proc_start(&c, status, NULL);
        ck_assert_msg(proc_wait(&c, WAIT_MS) == 0, "status %d: %s", i, proc_output_tail(&c));
        proc_close(&c);
        usleep(500 * 1000);
    }
    proc_signal(&d.p, SIGTERM);
    ck_assert_int_eq(proc_wait(&d.p, WAIT_MS), 0);
    ck_assert_msg(strstr(proc_output(&d.p), "its filesystem held the last write for 5000 ms: ddpd stops without it"),
                  "%s", proc_output_tail(&d.p));
    proc_close(&d.p);
    unlink(metrics);
}
END_TEST

/* Reads fd into buf (NUL-terminated, *len so far) until needle is in it, or, with needle
 * NULL, until the end; at most timeout_ms. */
static bool read_until(int fd, const char *needle, char *buf, size_t size, size_t *len, int timeout_ms) {
    uint64_t deadline = clock_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        buf[*len] = '\0';
        if (needle && strstr(buf, needle))
            return true;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (clock_now_ms() >= deadline || poll(&p, 1, clock_ms_until(deadline)) <= 0)
            return false;
        ssize_t n = read(fd, buf + *len, size - 1 - *len);
        if (n <= 0)
            return !needle;
        *len += (size_t)n;
    }
}

/* ddpd's stderr is a socket, as the journal's stream under systemd, that nobody reads: its
 * loop goes on (39 joins past --user-jobs, refused and logged into the full socket, and a
 * status, are answered; it waited on the socket before), and once it is read again ddpd says how many lines it
 * dropped; every line arrives whole. */
START_TEST(test_journal_that_does_not_read) {
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    int small = 4096; /* a few lines fill it */
    ck_assert_int_eq(setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
    char endpoint[128];
    snprintf(endpoint, sizeof(endpoint), "ipc:///tmp/check_service_journal_%d.sock", (int)getpid());
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(sv[1], 2) < 0)
            _exit(126);
        unsetenv("JOURNAL_STREAM"); /* lines as on a terminal, whatever runs the tests */
        execl(DDPD_PATH, DDPD_PATH, "--listen", endpoint, "--user-jobs", "1", (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    static char text[1 << 20];
    size_t len = 0;
    ck_assert_msg(read_until(sv[0], "listening on", text, sizeof(text), &len, WAIT_MS), "%s", text);
    void *ctx = zmq_ctx_new(), *s[40];
    for (int i = 0; i < 40; i++) { /* one job (--user-jobs 1), then 39 joins refused, each logged */
        s[i] = raw_connect(ctx, endpoint);
        char job[16];
        snprintf(job, sizeof(job), "j%d", i);
        Ddp__Join join = DDP__JOIN__INIT;
        join.data_plane = DDP_DATA_PLANE_VERSION;
        join.world_size = 2;
        join.rank = -1;
        join.pid = 7;
        join.host = (char *)"test";
        Ddp__Envelope env;
        wire_envelope_init(&env, DDP__MSG_TYPE__JOIN, job, -1, 0, 1);
        env.join = &join;
        ck_assert_int_eq(wire_send(s[i], NULL, 0, &env, NULL, 0), 0);
        if (i == 0) /* the job this user may hold, before the others */
            raw_wait_members(ctx, endpoint, "j0", 1, WAIT_MS);
    }
    for (int i = 1; i < 40; i++) { /* all taken */
        wire_msg msg;
        ck_assert_int_eq(raw_next(s[i], WAIT_MS, &msg), 0);
        ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__REJECT);
        wire_msg_close(&msg);
    }
    const char *status[] = {DDPCTL_PATH, "--coordinator", endpoint, "--timeout-ms", "3000", "status", NULL};
    proc c;
    proc_start(&c, status, NULL);
    ck_assert_msg(proc_wait(&c, WAIT_MS) == 0, "%s", proc_output_tail(&c));
    proc_close(&c);
    for (int i = 0; i < 40; i++)
        zmq_close(s[i]);
    zmq_ctx_term(ctx);
    /* read again: what the socket holds, then, once ddpd is told to stop, to the end */
    ck_assert(!read_until(sv[0], "(no such line)", text, sizeof(text), &len, 500));
    kill(pid, SIGTERM);
    ck_assert(read_until(sv[0], NULL, text, sizeof(text), &len, WAIT_MS));
    int status_code = 0;
    ck_assert_int_eq(waitpid(pid, &status_code, 0), pid);
    ck_assert_msg(WIFEXITED(status_code) && WEXITSTATUS(status_code) == 0, "ddpd: status %d", status_code);
    close(sv[0]);
    ck_assert_msg(strstr(text, "log lines dropped: stderr (the journal) did not take them"), "%s", text);
    ck_assert_msg(strstr(text, "ddpd is shutting down (SIGTERM)"), "%s", text);
    for (const char *line = text; *line; line = strchr(line, '\n') + 1) {
        ck_assert_msg(strncmp(line, "ddpd: ", 6) == 0 && strchr(line, '\n'), "a line cut or merged: %.200s", line);
    }
}
END_TEST

/* ddpctl status names a rank that waits in a collective for another, and for how long. */
START_TEST(test_stall_report) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    proc ranks[2];
    const char *argv[] = {COLL_FAULT_PATH, "late", NULL};
    for (int r = 0; r < 2; r++)
        rank_start(&ranks[r], &d, 2, r, "stall", argv);
    for (int r = 0; r < 2; r++)
        ck_assert_msg(proc_expect(&ranks[r], "waiting", WAIT_MS, NULL, 0), "%s", proc_output_tail(&ranks[r]));
    /* Ask until the wait is long enough to be reported (each ask is a full request). */
    const char *ctl[] = {DDPCTL_PATH, "--coordinator", d.endpoint, "status", NULL};
    bool found = false;
    for (int i = 0; i < 2000 && !found; i++) {
        proc c;
        proc_start(&c, ctl, NULL);
        ck_assert_int_eq(proc_wait(&c, WAIT_MS), 0);
        found = strstr(proc_output(&c), "rank 0 has waited") != NULL;
        if (found)
            ck_assert_msg(strstr(proc_output(&c), "in all_reduce #") && strstr(proc_output(&c), "for rank 1"), "%s",
                          proc_output_tail(&c));
        proc_close(&c);
    }
    ck_assert_msg(found, "no stall report");
    for (int r = 0; r < 2; r++)
        proc_close(&ranks[r]);
    ddpd_stop(&d);
}
END_TEST

int main(int argc, char **argv) {
#ifndef DDP_HAVE_SYSTEMD
    puts("built without libsystemd: skipped");
    return 77;
#endif
    Suite *s = suite_create("service");
    TCase *tc = tcase_create("service");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_notify_and_metrics);
    tcase_add_test(tc, test_stall_report);
    tcase_add_test(tc, test_metrics_on_a_slow_disk);
    tcase_add_test(tc, test_journal_that_does_not_read);
    suite_add_tcase(s, tc);
    return check_main(s, argc, argv);
}
