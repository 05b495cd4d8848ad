#define _GNU_SOURCE /* SO_PEERCRED, struct ucred */
#include "common/fd_socket.h"

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fd_passed.h"

int fd_socket_peer(int sock, fd_peer *ret) {
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
        return -errno;
    *ret = (fd_peer){.pid = cred.pid, .uid = cred.uid};
    return 0;
}

int fd_socket_send(int sock, int fd, int32_t rank) {
    char control[CMSG_SPACE(sizeof(int))] = {0};
    struct iovec iov = {&rank, sizeof(rank)};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof(control)};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    return sendmsg(sock, &msg, MSG_NOSIGNAL) == (ssize_t)sizeof(rank) ? 0 : -errno;
}

void fd_socket_close_passed(int fd) {
    fd_passed_kind kind = fd_passed_kind_of(fd);
    struct stat st;
    if (kind == FD_PASSED_SOCKET || (kind == FD_PASSED_UNKNOWN && fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode))) {
        /* a sender's SO_LINGER would hold close() for as long as it set */
        struct linger at_once = {.l_onoff = 1, .l_linger = 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &at_once, sizeof(at_once));
    }
    if (kind == FD_PASSED_MEMFD || kind == FD_PASSED_QUIET || kind == FD_PASSED_UNKNOWN)
        close(fd);
    else /* a file's filesystem may hold close(), and a socket's may hold files in flight (fd_passed.h) */
        fd_passed_close_aside(fd);
}

/* Closes every descriptor msg carried: what a refused message brought must not stay open. */
static void close_passed(struct msghdr *msg) {
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(msg); cm; cm = CMSG_NXTHDR(msg, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS || cm->cmsg_len < CMSG_LEN(0))
            continue;
        size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
            fd_socket_close_passed(fd);
        }
    }
}

int fd_socket_recv(int sock, uint64_t deadline_ms, int *ret_fd, int32_t *ret_rank) {
    struct pollfd pfd = {.fd = sock, .events = POLLIN};
    int n = poll(&pfd, 1, clock_ms_until(deadline_ms));
    if (n <= 0)
        return n == 0 ? -ETIMEDOUT : -errno;
    /* room for as many as one message may carry (the kernel's SCM_MAX_FD), so that extra
     * descriptors arrive and are closed here: those that did not fit the kernel would close
     * on this thread's way out of recvmsg, lingering as long as their sender set */
    union {
        char bytes[CMSG_SPACE(253 * sizeof(int))];
        struct cmsghdr align;
    } control;
    struct iovec iov = {ret_rank, sizeof(*ret_rank)};
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.bytes, .msg_controllen = sizeof(control.bytes)};
    ssize_t got = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    if (got < 0)
        return -errno;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    if (got != (ssize_t)sizeof(*ret_rank) || (msg.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) || !cm ||
        cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS || cm->cmsg_len != CMSG_LEN(sizeof(int)) ||
        CMSG_NXTHDR(&msg, cm)) {
        close_passed(&msg);
        return -EPROTO;
    }
    memcpy(ret_fd, CMSG_DATA(cm), sizeof(int));
    return 0;
}

int fd_socket_listen(const char *prefix, char name[FD_SOCKET_NAME_BYTES], int backlog, int *ret_sock) {
    unsigned char bytes[16];
    if (getrandom(bytes, sizeof(bytes), 0) != (ssize_t)sizeof(bytes))
        return -errno;
    int k = snprintf(name, FD_SOCKET_NAME_BYTES, "%.8s", prefix);
    for (size_t i = 0; i < sizeof(bytes); i++)
        k += snprintf(name + k, FD_SOCKET_NAME_BYTES - (size_t)k, "%02x", bytes[i]);
    int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    memcpy(addr.sun_path + 1, name, strlen(name)); /* sun_path[0] = 0: abstract, no file */
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name));
    if (sock < 0 || bind(sock, (struct sockaddr *)&addr, len) < 0 || listen(sock, backlog) < 0) {
        int r = -errno;
        if (sock >= 0)
            close(sock);
        return r;
    }
    *ret_sock = sock;
    return 0;
}

int fd_socket_connect(const char *name, int *ret_sock) {
    int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    size_t n = strnlen(name, FD_SOCKET_NAME_BYTES - 1);
    memcpy(addr.sun_path + 1, name, n);
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
    if (sock < 0 || connect(sock, (struct sockaddr *)&addr, len) < 0) {
        int r = -errno;
        if (sock >= 0)
            close(sock);
        return r;
    }
    *ret_sock = sock;
    return 0;
}
