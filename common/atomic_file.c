#define _GNU_SOURCE /* mkostemp, O_TMPFILE */
#include "common/atomic_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *file_kind(mode_t mode) {
    return S_ISDIR(mode)    ? "a directory"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
           : S_ISFIFO(mode) ? "a FIFO"
           : S_ISSOCK(mode) ? "a socket"
                            : "not a regular file";
}

#define MAX_LINKS 40 /* as the kernel's ELOOP */

/* The file that writing to path replaces, in ret (PATH_MAX): path itself, or where its
 * symlinks lead (a link to a file not there yet included); checked to be a regular file
 * or nothing, in a directory that exists. */
static int resolve_target(const char *path, const char *flag, char *ret, char *err, size_t err_size, int links) {
    struct stat st;
    if (!path || !*path) {
        snprintf(err, err_size, "%s: an empty path", flag);
        return -EINVAL;
    }
    if (stat(path, &st) == 0) { /* it exists: through any symlinks, it must be a regular file */
        if (!S_ISREG(st.st_mode)) {
            snprintf(err, err_size, "%s %s: %s, not a regular file", flag, path, file_kind(st.st_mode));
            return S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
        }
        if (!realpath(path, ret)) {
            int r = -errno;
            snprintf(err, err_size, "%s %s: %s", flag, path, strerror(-r));
            return r;
        }
        return 0;
    }
    if (errno != ENOENT) {
        int r = -errno;
        snprintf(err, err_size, "%s %s: %s", flag, path, strerror(-r));
        return r;
    }
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) { /* a link to a file not there yet: it is made there */
        char link[PATH_MAX], next[PATH_MAX], dir_copy[PATH_MAX];
        ssize_t n = readlink(path, link, sizeof(link) - 1);
        if (n < 0 || links >= MAX_LINKS) {
            int r = n < 0 ? -errno : -ELOOP;
            snprintf(err, err_size, "%s %s: %s", flag, path, strerror(-r));
            return r;
        }
        link[n] = '\0';
        snprintf(dir_copy, sizeof(dir_copy), "%s", path);
        if ((size_t)snprintf(next, sizeof(next), "%s%s%s", link[0] == '/' ? "" : dirname(dir_copy),
                             link[0] == '/' ? "" : "/", link) >= sizeof(next)) {
            snprintf(err, err_size, "%s: the path is too long", flag);
            return -ENAMETOOLONG;
        }
        return resolve_target(next, flag, ret, err, err_size, links + 1);
    }
    /* Not there yet: the directory must be. */
    char dir_copy[PATH_MAX], base_copy[PATH_MAX], dir[PATH_MAX];
    if (strlen(path) >= sizeof(dir_copy)) {
        snprintf(err, err_size, "%s: the path is too long", flag);
        return -ENAMETOOLONG;
    }
    snprintf(dir_copy, sizeof(dir_copy), "%s", path);
    snprintf(base_copy, sizeof(base_copy), "%s", path);
    const char *d = dirname(dir_copy), *b = basename(base_copy);
    int r = realpath(d, dir) ? 0 : -errno;
    if (r == 0 && (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)))
        r = -ENOTDIR;
    if (r < 0) {
        snprintf(err, err_size, "%s %s: the directory %s %s", flag, path, d,
                 r == -ENOENT    ? "does not exist"
                 : r == -ENOTDIR ? "is not a directory"
                                 : strerror(-r));
        return r;
    }
    if ((size_t)snprintf(ret, PATH_MAX, "%s/%s", strcmp(dir, "/") == 0 ? "" : dir, b) >= PATH_MAX) {
        snprintf(err, err_size, "%s: the path is too long", flag);
        return -ENAMETOOLONG;
    }
    return 0;
}

/* The target, resolved, in a directory this process may write to. */
static int prepare(const char *path, const char *flag, char *ret_target, char *err, size_t err_size) {
    char dir[PATH_MAX];
    int r = resolve_target(path, flag, ret_target, err, err_size, 0);
    if (r < 0)
        return r;
    snprintf(dir, sizeof(dir), "%s", ret_target);
    if (access(dirname(dir), W_OK | X_OK) < 0) {
        r = -errno;
        snprintf(err, err_size, "%s %s: cannot write in %s: %s", flag, path, dir, strerror(-r));
        return r;
    }
    return 0;
}

int atomic_file_check(const char *path, const char *flag, char *err, size_t err_size) {
    char target[PATH_MAX];
    return prepare(path, flag, target, err, err_size);
}

/* This host's name as it goes into a temporary file's: letters, digits and '-' only. */
static void host_tag(char *buf, size_t size) {
    char host[256] = "";
    if (gethostname(host, sizeof(host) - 1) < 0 || !host[0])
        snprintf(host, sizeof(host), "host");
    size_t i = 0;
    for (; host[i] && i + 1 < size && i < 64; i++) {
        char c = host[i];
        buf[i] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ? c : '_';
    }
    buf[i] = '\0';
}

/* The temporary files of base that a writer on this host killed before its commit left in
 * dir, on a filesystem without O_TMPFILE (NFS): a checkpoint's size each. They are named
 * .BASE.ddp-HOST.XXXXXX (atomic_file_open), no one else's name (rsync's are .BASE.XXXXXX),
 * and only this host's count: where locks are local to a host (NFS mounted nolock), another
 * host's writer holds none here. A writer holds an exclusive lock on its own file until it
 * is renamed, so one that can be locked has none: it goes. */
static void remove_leftovers(const char *dir, const char *base, const char *host) {
    char prefix[NAME_MAX + 80];
    int n = snprintf(prefix, sizeof(prefix), ".%s.ddp-%s.", base, host);
    DIR *d = n > 0 && (size_t)n < sizeof(prefix) ? opendir(dir) : NULL;
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        const char *name = e->d_name;
        if (strncmp(name, prefix, (size_t)n) != 0 || strlen(name + n) != 6)
            continue;
        /* shared, so that a file opened only for reading (as this one) can be locked on NFS */
        int fd = openat(dirfd(d), name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && flock(fd, LOCK_SH | LOCK_NB) == 0)
            unlinkat(dirfd(d), name, 0);
        if (fd >= 0)
            close(fd);
    }
    closedir(d);
}

int atomic_file_open(atomic_file *f, const char *path, mode_t mode, const char *flag, char *err, size_t err_size) {
    f->fd = -1;
    f->unnamed = 0;
    f->replaced = 0;
    int r = prepare(path, flag, f->target, err, err_size);
    if (r < 0)
        return r;
    char dir[PATH_MAX], base[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", f->target);
    snprintf(base, sizeof(base), "%s", f->target);
    const char *in = dirname(dir);
    char host[72];
    host_tag(host, sizeof(host));
    /* Hidden and unique: never anyone else's file, never followed through a link. */
    if ((size_t)snprintf(f->tmp, sizeof(f->tmp), "%s/.%s.ddp-%s.XXXXXX", in, basename(base), host) >= sizeof(f->tmp)) {
        snprintf(err, err_size, "%s %s: the path is too long", flag, path);
        return -ENAMETOOLONG;
    }
    f->fd = open(in, O_TMPFILE | O_RDWR | O_CLOEXEC, mode);
    if (f->fd >= 0) {
        f->unnamed = 1;
        if (fchmod(f->fd, mode) == 0)
            return 0;
        r = -errno;
        snprintf(err, err_size, "%s %s: cannot create a file beside it: %s", flag, path, strerror(-r));
        atomic_file_abort(f);
        return r;
    }
    remove_leftovers(in, basename(base), host); /* a filesystem without O_TMPFILE: a killed writer's are named */
    f->fd = mkostemp(f->tmp, O_CLOEXEC);
    if (f->fd >= 0)
        (void)flock(f->fd, LOCK_EX | LOCK_NB); /* held till the rename: not a leftover (where there are locks) */
    if (f->fd < 0 || fchmod(f->fd, mode) < 0) {
        r = -errno;
        snprintf(err, err_size, "%s %s: cannot create a file beside it: %s", flag, path, strerror(-r));
        atomic_file_abort(f);
        return r;
    }
    return 0;
}

/* The unnamed file f->fd linked as f->tmp (a new name from its template): only now does
 * it have a name, to be renamed over the target at once. */
static int name_unnamed(atomic_file *f) {
    char proc[64], template[PATH_MAX];
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", f->fd);
    snprintf(template, sizeof(template), "%s", f->tmp);
    for (int tries = 0; tries < 100; tries++) {
        unsigned char bytes[3];
        if (getrandom(bytes, sizeof(bytes), 0) != (ssize_t)sizeof(bytes))
            return -errno;
        snprintf(f->tmp, sizeof(f->tmp), "%.*s%02x%02x%02x", (int)(strlen(template) - 6), template, bytes[0], bytes[1],
                 bytes[2]);
        if (linkat(AT_FDCWD, proc, AT_FDCWD, f->tmp, AT_SYMLINK_FOLLOW) == 0)
            return 0;
        if (errno != EEXIST)
            return -errno;
    }
    return -EEXIST;
}

int atomic_file_commit(atomic_file *f, const char *flag, char *err, size_t err_size) {
    int r = 0;
    f->replaced = 0;
    if (fsync(f->fd) < 0)
        r = -errno;
    if (r == 0 && f->unnamed && (r = name_unnamed(f)) == 0)
        f->unnamed = 0;
    if (close(f->fd) < 0 && r == 0) /* its lock goes: a concurrent writer of the same target could take it
                                       for a leftover until the rename, but not while it was written */
        r = -errno;
    f->fd = -1;
    if (r == 0 && rename(f->tmp, f->target) < 0)
        r = -errno;
    if (r < 0) {
        snprintf(err, err_size, "%s %s: cannot write it: %s", flag, f->target, strerror(-r));
        if (!f->unnamed) /* else it never had a name: gone with its descriptor */
            unlink(f->tmp);
        return r;
    }
    f->replaced = 1;
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", f->target);
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    /* Some filesystems (FUSE, 9p, some network mounts) cannot sync a directory: the rename is
     * as durable as they make it. An I/O error is an error. */
    if ((dfd < 0 || fsync(dfd) < 0) && errno != EINVAL && errno != ENOTSUP && errno != EROFS) {
        r = -errno;
        snprintf(err, err_size,
                 "%s %s: written, but its directory could not be synced (it may not survive a power loss): %s", flag,
                 f->target, strerror(-r));
    }
    if (dfd >= 0)
        close(dfd);
    return r;
}

void atomic_file_abort(atomic_file *f) {
    if (f->fd >= 0) {
        close(f->fd);
        if (!f->unnamed)
            unlink(f->tmp);
    }
    f->fd = -1;
}
