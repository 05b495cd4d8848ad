#include "common/fd_limit.h"

#include <errno.h>

int fd_limit_raise(struct rlimit *ret_was) {
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) < 0)
        return -errno;
    if (ret_was)
        *ret_was = r;
    r.rlim_cur = r.rlim_max;
    return setrlimit(RLIMIT_NOFILE, &r) < 0 ? -errno : 0;
}
