/* The open-file limit of a process that holds a descriptor per member or rank (ddpd, ddp-run):
 * the soft limit is often 1024 while the hard one is far above, and running out makes a
 * crowd fail in ways that look like something else. */
#pragma once
#include <sys/resource.h>

/* Raises the soft RLIMIT_NOFILE to the hard limit; what it was goes to ret_was (when not
 * NULL), for children that should get the limit they would have had. 0 or -errno. */
int fd_limit_raise(struct rlimit *ret_was);
