/* Replacing a file whole (checkpoints, ddpd's metrics file): readers see the old contents
 * or the new, never half, and a crash leaves one of the two. A path that names something
 * other than a regular file (a device, a FIFO, a directory) is refused, never replaced; a
 * symlink is written through, to its target. */
#pragma once
#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct {
    char target[PATH_MAX]; /* the file replaced: the path, or the symlink's target */
    char tmp[PATH_MAX];    /* the new contents' name beside it, from the commit (or the open: see unnamed) */
    int fd;                /* open on the new contents; -1 once committed or aborted */
    int unnamed;           /* the new contents have no name until the commit (O_TMPFILE): a process
                              killed while writing leaves nothing behind */
    int replaced;          /* set by the commit once the target holds the new contents: a commit
                              that fails after that only failed to sync the directory */
} atomic_file;

/* Whether path may be replaced: a regular file or nothing yet, in a directory that exists
 * and this process may write to. flag names the option in err ("--checkpoint /dev/full: a
 * character device, not a regular file"). 0 or a negative errno. */
int atomic_file_check(const char *path, const char *flag, char *err, size_t err_size);
/* Checks path as above, then creates a new temporary file beside its target with the given
 * mode, open for writing at f->fd: unnamed where the filesystem can (O_TMPFILE), else
 * hidden, exclusive, never through a link. */
int atomic_file_open(atomic_file *f, const char *path, mode_t mode, const char *flag, char *err, size_t err_size);
/* Flushes the new contents to disk, closes, renames them over the target and makes the
 * rename durable (fsync of the directory). On failure before the rename the temporary file
 * is removed and the target left as it was; a failure of the directory's sync comes after
 * it (f->replaced): the new contents are in place but may not survive a power loss. err
 * names the target and which of the two it was. */
int atomic_file_commit(atomic_file *f, const char *flag, char *err, size_t err_size);
/* Closes and removes the temporary file; the target stays as it was. */
void atomic_file_abort(atomic_file *f);
