#define _GNU_SOURCE /* memfd_create, the F_SEAL_* flags */
#include "common/shm_segment.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "common/fd_passed.h"

int shm_segment_make(const char *name, size_t bytes, int *ret_fd) {
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -errno;
    if (ftruncate(fd, (off_t)bytes) < 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
        int r = -errno;
        close(fd);
        return r;
    }
    *ret_fd = fd;
    return 0;
}

int shm_segment_map(int fd, size_t bytes, char **ret, char *why, size_t why_size) {
    fd_passed_kind kind = fd_passed_kind_of(fd); /* before anything asks its filesystem */
    if (kind != FD_PASSED_MEMFD && kind != FD_PASSED_UNKNOWN) {
        snprintf(why, why_size, "not a memfd of shared memory (%s)", fd_passed_kind_name(kind));
        return -EPROTO;
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        snprintf(why, why_size, "cannot stat it: %s", strerror(errno));
        return -errno;
    }
    int seals = S_ISREG(st.st_mode) ? fcntl(fd, F_GET_SEALS) : -1;
    if (!S_ISREG(st.st_mode) || seals < 0) {
        snprintf(why, why_size, "not a memfd segment (%s)",
                 S_ISREG(st.st_mode) ? "a file without seals" : "not a file");
        return -EPROTO;
    }
    /* shmem only: a memfd of huge pages whose owner punched a hole in it faults (SIGBUS)
     * under the mapping once the pool is spent, ending whoever reads it */
    struct statfs fs;
    if (fstatfs(fd, &fs) < 0 || fs.f_type != TMPFS_MAGIC) {
        snprintf(why, why_size, "not a memfd of shared memory (of huge pages, or a file elsewhere)");
        return -EPROTO;
    }
    if ((size_t)st.st_size != bytes) {
        snprintf(why, why_size, "%lld bytes, not a segment's %zu", (long long)st.st_size, bytes);
        return -EPROTO;
    }
    if (!(seals & F_SEAL_SHRINK)) {
        snprintf(why, why_size, "not sealed against shrinking: it could vanish under the mapping");
        return -EPROTO;
    }
    if (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) {
        snprintf(why, why_size, "sealed against writing: its owner could not post to it");
        return -EPROTO;
    }
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        int r = -errno;
        snprintf(why, why_size, "cannot map it: %s", strerror(errno));
        return r;
    }
    *ret = m;
    return 0;
}
