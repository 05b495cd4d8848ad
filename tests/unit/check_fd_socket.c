/* Descriptors handed between processes (common/fd_socket.h): one descriptor and a tag
 * arrive; any other message (no descriptor, two, a short tag) is -EPROTO and whatever
 * descriptors it carried are closed, so a stranger cannot fill the receiver's table. */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fd_passed.h"
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
        char bytes[CMSG_SPACE(16 * sizeof(int))];
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

/* A TCP connection whose send queue is full (its peer reads nothing) and that lingers an
 * hour on close: the last close of it would wait that long. Its peer's end in *ret_peer. */
static int lingering_socket(int *ret_listener, int *ret_peer) {
    int listener = socket(AF_INET, SOCK_STREAM, 0), one = 4096;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(addr);
    ck_assert_int_eq(bind(listener, (struct sockaddr *)&addr, sizeof(addr)), 0);
    ck_assert_int_eq(listen(listener, 1), 0);
    ck_assert_int_eq(getsockname(listener, (struct sockaddr *)&addr, &len), 0);
    int sock = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(sock, SOL_SOCKET, SO_SNDBUF, &one, sizeof(one));
    ck_assert_int_eq(connect(sock, (struct sockaddr *)&addr, sizeof(addr)), 0);
    int peer = accept(listener, NULL, NULL);
    ck_assert_int_ge(peer, 0);
    setsockopt(peer, SOL_SOCKET, SO_RCVBUF, &one, sizeof(one));
    fcntl(sock, F_SETFL, O_NONBLOCK);
    char junk[4096] = {0};
    while (write(sock, junk, sizeof(junk)) > 0)
        ;
    struct linger an_hour = {.l_onoff = 1, .l_linger = 3600};
    ck_assert_int_eq(setsockopt(sock, SOL_SOCKET, SO_LINGER, &an_hour, sizeof(an_hour)), 0);
    fcntl(sock, F_SETFL, 0);
    *ret_listener = listener;
    *ret_peer = peer;
    return sock;
}

/* Such a socket, passed as the last reference (ddpd's ps socket takes them from any
 * member of any job): closed at once, not held for its linger, whether refused with seven
 * other descriptors (more than once fitted the buffer: the kernel closed the rest on the
 * receiver's thread) or taken alone and closed by fd_socket_close_passed. A close that
 * lingered would outlast the case's timeout. */
START_TEST(test_lingering_socket_closed_at_once) {
    int pair[2], listener, peer, got = -1;
    int32_t tag = -1;
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, pair), 0);
    int fds[8];
    fds[0] = lingering_socket(&listener, &peer);
    for (int i = 1; i < 8; i++)
        fds[i] = fds[0];
    int32_t seven = 7;
    send_raw(pair[0], &seven, sizeof(seven), fds, 8);
    ck_assert_int_eq(fd_socket_send(pair[0], fds[0], 7), 0);
    close(fds[0]);
    ck_assert_int_eq(fd_socket_recv(pair[1], clock_now_ms() + 1000, &got, &tag), -EPROTO); /* eight of them */
    ck_assert_int_eq(fd_socket_recv(pair[1], clock_now_ms() + 1000, &got, &tag), 0);
    fd_socket_close_passed(got); /* the last reference */
    close(peer);
    close(listener);
    close(pair[0]);
    close(pair[1]);
}
END_TEST

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

/* What a passed descriptor is, told from /proc without asking its filesystem: only a
 * memfd of shared memory is one; a file elsewhere is closed on the closing thread. */
START_TEST(test_passed_kinds) {
    int memfd = memfd_create("kind", MFD_CLOEXEC), huge = memfd_create("huge", MFD_CLOEXEC | MFD_HUGETLB);
    int pipes[2], sv[2], events = eventfd(0, EFD_CLOEXEC);
    char path[] = "/tmp/check_fd_passed_XXXXXX";
    int file = mkstemp(path);
    ck_assert(memfd >= 0 && file >= 0 && events >= 0);
    unlink(path);
    ck_assert_int_eq(pipe(pipes), 0);
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
    ck_assert_int_eq(fd_passed_kind_of(memfd), FD_PASSED_MEMFD);
    if (huge >= 0) /* huge pages live on another mount (where the kernel has them) */
        ck_assert_int_eq(fd_passed_kind_of(huge), FD_PASSED_FILE);
    ck_assert_int_eq(fd_passed_kind_of(file), FD_PASSED_FILE);
    ck_assert_int_eq(fd_passed_kind_of(pipes[0]), FD_PASSED_QUIET);
    ck_assert_int_eq(fd_passed_kind_of(events), FD_PASSED_QUIET);
    ck_assert_int_eq(fd_passed_kind_of(sv[0]), FD_PASSED_SOCKET);
    ck_assert_int_eq(fd_passed_kind_of(1000000), FD_PASSED_FILE); /* not open: nothing is assumed */
    fd_socket_close_passed(file);                                 /* on the closing thread: closed soon */
    uint64_t deadline = clock_now_ms() + 5000;
    while (fcntl(file, F_GETFD) >= 0 && clock_now_ms() < deadline)
        usleep(1000);
    ck_assert_msg(fcntl(file, F_GETFD) < 0, "a file passed on was not closed");
    const int opened[] = {memfd, pipes[0], pipes[1], sv[0], sv[1], events};
    for (size_t i = 0; i < sizeof(opened) / sizeof(opened[0]); i++)
        close(opened[i]);
    if (huge >= 0)
        close(huge);
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("fd_socket");
    TCase *tc = tcase_create("fd_socket");
    tcase_add_test(tc, test_one_descriptor_and_tag);
    tcase_add_test(tc, test_malformed_refused_and_closed);
    tcase_add_test(tc, test_lingering_socket_closed_at_once);
    tcase_add_test(tc, test_passed_kinds);
    suite_add_tcase(s, tc);
    return check_main(s, argc, argv);
}
