/* The launcher's output queue against real destinations: a terminal nobody reads (the
 * queue must not block on it), one pipe for stdout and stderr (lines whole, in order), a
 * reader gone (dropped, not held), and the memory it holds counted whole. */
#define _GNU_SOURCE /* posix_openpt, cfmakeraw */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#include "tests/check_main.h"
#include "worker/tools/out_queue.h"

#define LINE_BYTES 99

/* fd becomes to's; returns the old one, for restore(). */
static int redirect(int fd, int to) {
    int saved = dup(fd);
    ck_assert_int_ge(saved, 0);
    ck_assert_int_eq(dup2(to, fd), fd);
    return saved;
}

static void restore(int fd, int saved) {
    dup2(saved, fd);
    close(saved);
}

/* Line i: "[i] " and LINE_BYTES of the letter i % 26, so that a line cut or out of order
 * shows. */
static void put_line(out_queue *q, int fd, int i) {
    char prefix[24], line[LINE_BYTES + (LINE_BYTES * 70)];
    size_t n = i % 50 == 7 ? sizeof(line) : LINE_BYTES; /* now and then longer than PIPE_BUF */
    snprintf(prefix, sizeof(prefix), "[%d] ", i);
    memset(line, 'a' + i % 26, n);
    out_queue_put(q, fd, prefix, line, n);
}

/* Reads from fd until n lines have come (writing the queue meanwhile) and checks each. */
static void read_lines(out_queue *q, int fd, int n) {
    static char buf[1 << 22];
    size_t len = 0;
    int seen = 0;
    while (seen < n) {
        out_queue_write(q);
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        ck_assert_msg(poll(&pfd, 1, 5000) == 1, "%d of %d lines came", seen, n);
        ssize_t got = read(fd, buf + len, sizeof(buf) - len - 1);
        ck_assert_int_gt(got, 0);
        len += (size_t)got;
        buf[len] = '\0';
        char *start = buf, *nl;
        while ((nl = strchr(start, '\n'))) {
            char expected[24];
            int k = snprintf(expected, sizeof(expected), "[%d] ", seen);
            ck_assert_msg(strncmp(start, expected, (size_t)k) == 0, "line %d: %.30s", seen, start);
            for (char *c = start + k; c < nl; c++)
                ck_assert_msg(*c == 'a' + seen % 26, "line %d cut or mixed", seen);
            seen++;
            start = nl + 1;
        }
        len -= (size_t)(start - buf);
        memmove(buf, start, len);
    }
    ck_assert_uint_eq(len, 0);
}

/* A terminal that nobody reads (a stalled ssh session, Ctrl-S) polls writable while it has
 * any room: the queue writes what it takes and returns, never waiting in write(2). */
START_TEST(test_stalled_terminal) {
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    ck_assert_int_ge(master, 0);
    ck_assert_int_eq(grantpt(master), 0);
    ck_assert_int_eq(unlockpt(master), 0);
    int tty = open(ptsname(master), O_RDWR | O_NOCTTY);
    ck_assert_int_ge(tty, 0);
    struct termios t;
    tcgetattr(tty, &t);
    cfmakeraw(&t);
    tcsetattr(tty, TCSANOW, &t);
    int saved = redirect(STDOUT_FILENO, tty);
    out_queue q = {0};
    out_queue_open(&q);
    const int n = 3000;
    for (int i = 0; i < n; i++) {
        put_line(&q, STDOUT_FILENO, i);
        out_queue_write(&q); /* returns, with the terminal full */
    }
    ck_assert_uint_gt(q.waiting, 0);
    read_lines(&q, master, n);
    ck_assert_uint_eq(q.waiting, 0);
    out_queue_free(&q);
    restore(STDOUT_FILENO, saved);
    close(tty);
    close(master);
}
END_TEST

/* A socket nobody reads (journald's stream, stalled): sent to without waiting. */
START_TEST(test_stalled_socket) {
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    int saved = redirect(STDOUT_FILENO, sv[0]);
    out_queue q = {0};
    out_queue_open(&q);
    ck_assert(q.socket[STDOUT_FILENO]);
    const int n = 6000;
    for (int i = 0; i < n; i++) {
        put_line(&q, STDOUT_FILENO, i);
        out_queue_write(&q); /* returns, with the socket's buffer full */
    }
    ck_assert_uint_gt(q.waiting, 0);
    read_lines(&q, sv[1], n);
    ck_assert_uint_eq(q.waiting, 0);
    out_queue_free(&q);
    restore(STDOUT_FILENO, saved);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

/* stdout and stderr one pipe (2>&1), lines to each in turn, some longer than a pipe takes
 * at once: every line whole, in the order it was put. */
START_TEST(test_one_pipe_in_order) {
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    int out = redirect(STDOUT_FILENO, p[1]), err = redirect(STDERR_FILENO, p[1]);
    out_queue q = {0};
    out_queue_open(&q);
    const int n = 2000;
    for (int i = 0; i < n; i++)
        put_line(&q, i % 2 ? STDERR_FILENO : STDOUT_FILENO, i);
    /* each line alone in its chunk here: the memory held counts every chunk whole */
    ck_assert_uint_ge(q.held, (size_t)n * 4096);
    read_lines(&q, p[0], n);
    ck_assert_uint_eq(q.waiting, 0);
    ck_assert_uint_le(q.held, 2 * (LINE_BYTES * 71 + 4096)); /* the emptied last chunk kept */
    out_queue_free(&q);
    restore(STDOUT_FILENO, out);
    restore(STDERR_FILENO, err);
    close(p[0]);
    close(p[1]);
}
END_TEST

/* Output nobody can take any more (the reader went away) is dropped, not held. */
START_TEST(test_reader_gone) {
    signal(SIGPIPE, SIG_IGN); /* as the launcher has it */
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    int saved = redirect(STDOUT_FILENO, p[1]);
    close(p[1]);
    close(p[0]);
    out_queue q = {0};
    out_queue_open(&q);
    for (int i = 0; i < 100; i++)
        put_line(&q, STDOUT_FILENO, i);
    out_queue_write(&q);
    ck_assert(q.gone[STDOUT_FILENO]);
    ck_assert_uint_eq(q.waiting, 0);
    ck_assert_int_eq(out_queue_waiting_fd(&q), -1);
    put_line(&q, STDOUT_FILENO, 100); /* and so is what comes after */
    ck_assert_uint_eq(q.waiting, 0);
    ck_assert(out_queue_flush(&q, -1));
    out_queue_free(&q);
    restore(STDOUT_FILENO, saved);
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("out_queue");
    TCase *tc = tcase_create("out_queue");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_stalled_terminal);
    tcase_add_test(tc, test_stalled_socket);
    tcase_add_test(tc, test_one_pipe_in_order);
    tcase_add_test(tc, test_reader_gone);
    suite_add_tcase(s, tc);
    return check_main(s, argc, argv);
}
