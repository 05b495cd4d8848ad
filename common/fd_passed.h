/* A descriptor another process passed (SCM_RIGHTS): what it is, and closing it, without
 * asking its filesystem. A file on a FUSE mount its sender serves would hold fstat(),
 * fstatfs() and even close() (which sends FLUSH) for as long as the sender likes, only
 * SIGKILL ending the wait: ddpd's one thread, every user's jobs with it. /proc tells what
 * it is instead (its link and its mount, from fdinfo), and such a file is closed on a
 * thread of its own. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

typedef enum {
    FD_PASSED_MEMFD,  /* a memfd of shared memory (the kernel's own mount; not huge pages) */
    FD_PASSED_SOCKET, /* a socket */
    FD_PASSED_QUIET,  /* a pipe, an eventfd or another anonymous inode: nothing to wait on */
    FD_PASSED_FILE,   /* a file on some filesystem: touch it no more than needed */
    FD_PASSED_UNKNOWN /* /proc cannot tell (not mounted): the caller looks as it did before */
} fd_passed_kind;

fd_passed_kind fd_passed_kind_of(int fd);
/* Whether /proc here tells memfds apart (probed on the first call; ddpd asks at start-up,
 * to say so when it cannot). */
bool fd_passed_can_tell(void);
/* "a memfd", "a socket", ... for messages. */
const char *fd_passed_kind_name(fd_passed_kind kind);
/* Closes fd on a closing thread (started as needed, a few at most), where a close that
 * waits holds no one else; at once where no thread can be had. */
void fd_passed_close_aside(int fd);
/* The descriptors closed aside that are not closed yet (queued, or held in close): what a
 * stalled filesystem keeps open here. */
size_t fd_passed_closing(void);
