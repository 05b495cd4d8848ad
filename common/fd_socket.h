/* Handing file descriptors between the processes of one host: SOCK_SEQPACKET sockets in
 * the abstract namespace (no file anywhere; the name is random, and told only to whom it
 * concerns), SCM_RIGHTS, and the kernel's word on who is at the other end (SO_PEERCRED).
 * Every function returns 0 or a negative errno. */
#pragma once
#include <stdint.h>
#include <sys/types.h>

#define FD_SOCKET_NAME_BYTES 41 /* a prefix of up to 8 bytes, 32 hex digits, NUL */

/* Listens under prefix and a random suffix, written to name. */
int fd_socket_listen(const char *prefix, char name[FD_SOCKET_NAME_BYTES], int backlog, int *ret_sock);
/* Connects to the socket listening under name (made at once, accepted or not). */
int fd_socket_connect(const char *name, int *ret_sock);
/* The process at the other end, as the kernel says. */
typedef struct {
    pid_t pid;
    uid_t uid;
} fd_peer;
int fd_socket_peer(int sock, fd_peer *ret);
/* Sends fd with tag (a rank) as the message. */
int fd_socket_send(int sock, int fd, int32_t tag);
/* Receives one message of one descriptor and its tag, waiting until deadline_ms (the
 * monotonic clock of common/clock.h): -ETIMEDOUT after, -EPROTO for anything else (whose
 * descriptors, if any came, are closed). */
int fd_socket_recv(int sock, uint64_t deadline_ms, int *ret_fd, int32_t *ret_tag);
/* Closes a descriptor another process passed without waiting on it: a socket at once,
 * whatever SO_LINGER its sender set, and a file elsewhere (FUSE's) on the closing thread
 * (common/fd_passed.h): a close that waited would hold this thread, ddpd's only one. */
void fd_socket_close_passed(int fd);
