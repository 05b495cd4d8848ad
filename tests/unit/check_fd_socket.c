/* Descriptors handed between processes (common/fd_socket.h): one descriptor and a tag
 * arrive; any other message (no descriptor, two, a short tag) is -EPROTO and whatever
 * descriptors it carried are closed, so a stranger cannot fill the receiver's table. */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fd_socket.h"
#include "tests/check_main.h"

static int open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* Sends data (bytes of it) with fds[0..n_fds) over sock. */
static void send_raw(int sock, const void *data, size_t bytes, const int *fds, size_t n_fds) {
    union {
        char bytes[CMSG_SPACE(4 * sizeof(int))];
        struct cmsghdr align;
    } control = {0};
    struct iovec iov = {(void *)data, bytes};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (n_fds) {
        msg.msg_control = control.bytes;
        msg.msg_controllen = CMSG_SPACE(n_fds * sizeof(int));
        struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(n_fds * sizeof(int));
        memcpy(CMSG_DATA(cm), fds, n_fds * sizeof(int));
    }
    ck_assert_int_eq(sendmsg(sock, &msg, 0), (ssize_t)bytes);
}

START_TEST(test_one_descriptor_and_tag) {
    int pair[2], pipe_fds[2], got = -1;
    int32_t tag = -1;
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, pair), 0);
    ck_assert_int_eq(pipe(pipe_fds), 0);
    ck_assert_int_eq(fd_socket_send(pair[0], pipe_fds[1], 5), 0);
    ck_assert_int_eq(fd_socket_recv(pair[1], clock_now_ms() + 1000, &got, &tag), 0);
    ck_assert_int_eq(tag, 5);
    ck_assert_int_eq(write(got, "x", 1), 1); /* the pipe's write end, passed */
    char c = 0;
    ck_assert_int_eq(read(pipe_fds[0], &c, 1), 1);
    ck_assert_int_eq(c, 'x');
    close(got);
    ck_assert_int_eq(fd_socket_recv(pair[1], clock_now_ms() + 50, &got, &tag), -ETIMEDOUT);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    close(pair[0]);
    close(pair[1]);
}
END_TEST

START_TEST(test_malformed_refused_and_closed) {
    int pair[2], pipe_fds[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, pair), 0);
    ck_assert_int_eq(pipe(pipe_fds), 0);
    int32_t tag = 1;
    const int two[2] = {pipe_fds[0], pipe_fds[1]}, four[4] = {pipe_fds[0], pipe_fds[1], pipe_fds[0], pipe_fds[1]};
    int before = open_fds();
    for (int k = 0; k < 4; k++) {
        if (k == 0)
            send_raw(pair[0], &tag, sizeof(tag), two, 2); /* two descriptors */
        else if (k == 1)
            send_raw(pair[0], "x", 1, two, 1); /* a short tag */
        else if (k == 2)
            send_raw(pair[0], &tag, sizeof(tag), NULL, 0); /* no descriptor */
        else
            send_raw(pair[0], &tag, sizeof(tag), four, 4); /* more than fit: some dropped by the kernel */
        int got = -1;
        int32_t said = -1;
        ck_assert_int_eq(fd_socket_recv(pair[1], clock_now_ms() + 1000, &got, &said), -EPROTO);
        ck_assert_msg(open_fds() == before, "case %d left %d descriptors open", k, open_fds() - before);
    }
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    close(pair[0]);
    close(pair[1]);
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("fd_socket");
    TCase *tc = tcase_create("fd_socket");
    tcase_add_test(tc, test_one_descriptor_and_tag);
    tcase_add_test(tc, test_malformed_refused_and_closed);
    suite_add_tcase(s, tc);
    return check_main(s, argc, argv);
}
