/* Replacing a file whole (common/atomic_file.h): the commit puts the new contents in place
 * and nothing else in the directory; an abort, or a process killed before its commit,
 * leaves the old contents and no stray file (unnamed until the commit, O_TMPFILE); where
 * the filesystem has no O_TMPFILE (NFS), the next save removes what a killed one left, and
 * never a live writer's. */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/atomic_file.h"
#include "tests/check_main.h"

static char dir[64], path[96];

/* This program's fsync stands in for libc's (the executable's symbol wins), so that a
 * test can make a disk fail: of directories, or of files, with EIO. */
static enum { FSYNC_WORKS, FSYNC_FAILS_ON_DIRECTORIES, FSYNC_FAILS_ON_FILES } fsync_mode;

int fsync(int fd) {
    struct stat st;
    if (fsync_mode != FSYNC_WORKS && fstat(fd, &st) == 0 &&
        (S_ISDIR(st.st_mode) ? fsync_mode == FSYNC_FAILS_ON_DIRECTORIES : fsync_mode == FSYNC_FAILS_ON_FILES)) {
        errno = EIO;
        return -1;
    }
    return (int)syscall(SYS_fsync, fd);
}

/* And its open, so that a test can take O_TMPFILE away, as NFS does. */
static int no_tmpfile;

int open(const char *file, int flags, ...) {
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = va_arg(ap, mode_t);
        va_end(ap);
    }
    if (no_tmpfile && (flags & O_TMPFILE) == O_TMPFILE) {
        errno = EOPNOTSUPP;
        return -1;
    }
    return (int)syscall(SYS_openat, AT_FDCWD, file, flags, mode);
}

static void setup(void) {
    snprintf(dir, sizeof(dir), "/tmp/check_atomic_file_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/file", dir);
    FILE *f = fopen(path, "w");
    fputs("old", f);
    fclose(f);
}

static void teardown(void) {
    fsync_mode = FSYNC_WORKS;
    no_tmpfile = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            unlinkat(dirfd(d), e->d_name, 0);
    if (d)
        closedir(d);
    rmdir(dir);
}

/* An empty file named name in dir, its descriptor (open) or -1 (closed). */
static int make_beside(const char *name, bool keep_open) {
    char p[160];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    int fd = (int)syscall(SYS_openat, AT_FDCWD, p, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    ck_assert_int_ge(fd, 0);
    if (keep_open)
        return fd;
    close(fd);
    return -1;
}

static bool exists_beside(const char *name) {
    char p[160];
    struct stat st;
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return lstat(p, &st) == 0;
}

/* Entries of dir besides . and .. */
static int entries(void) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

static void expect_contents(const char *want) {
    char got[16] = "";
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(fgets(got, sizeof(got), f));
    fclose(f);
    ck_assert_str_eq(got, want);
}

static void open_and_write(atomic_file *f, const char *text) {
    char err[256] = "";
    ck_assert_msg(atomic_file_open(f, path, 0600, "--test", err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(write(f->fd, text, strlen(text)), (ssize_t)strlen(text));
}

START_TEST(test_commit) {
    atomic_file f;
    char err[256] = "";
    open_and_write(&f, "new");
    ck_assert_msg(atomic_file_commit(&f, "--test", err, sizeof(err)) == 0, "%s", err);
    expect_contents("new");
    ck_assert_int_eq(entries(), 1);
}
END_TEST

/* The rename happened, the directory's sync did not: an error, but one that says the new
 * contents are in place (a checkpoint's caller must not claim the old one stays). */
START_TEST(test_directory_sync_fails) {
    atomic_file f;
    char err[256] = "";
    open_and_write(&f, "new");
    fsync_mode = FSYNC_FAILS_ON_DIRECTORIES;
    ck_assert_int_eq(atomic_file_commit(&f, "--test", err, sizeof(err)), -EIO);
    ck_assert_int_eq(f.replaced, 1);
    ck_assert_msg(strstr(err, "written, but its directory could not be synced") != NULL, "%s", err);
    expect_contents("new");
    ck_assert_int_eq(entries(), 1);
}
END_TEST

/* The contents' own sync fails: the old contents stay, and nothing beside them. */
START_TEST(test_file_sync_fails) {
    atomic_file f;
    char err[256] = "";
    open_and_write(&f, "new");
    fsync_mode = FSYNC_FAILS_ON_FILES;
    ck_assert_int_eq(atomic_file_commit(&f, "--test", err, sizeof(err)), -EIO);
    ck_assert_int_eq(f.replaced, 0);
    ck_assert_msg(strstr(err, "cannot write it") != NULL, "%s", err);
    expect_contents("old");
    ck_assert_int_eq(entries(), 1);
}
END_TEST

START_TEST(test_abort) {
    atomic_file f;
    open_and_write(&f, "new");
    atomic_file_abort(&f);
    expect_contents("old");
    ck_assert_int_eq(entries(), 1);
}
END_TEST

/* A save killed between its open and its commit (as SIGKILL would: no commit, no abort)
 * in a child: whether its new contents were unnamed (1), named (0), or it failed (-1). */
static int save_killed_midway(void) {
    int pipe_fds[2];
    ck_assert_int_eq(pipe(pipe_fds), 0);
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        atomic_file f;
        char err[256];
        int unnamed = atomic_file_open(&f, path, 0600, "--test", err, sizeof(err)) == 0 && write(f.fd, "new", 3) == 3
                          ? f.unnamed
                          : -1;
        if (write(pipe_fds[1], &unnamed, sizeof(unnamed)) != (ssize_t)sizeof(unnamed))
            _exit(2);
        _exit(0);
    }
    int unnamed = -1, status = 0;
    ck_assert_int_eq(read(pipe_fds[0], &unnamed, sizeof(unnamed)), (ssize_t)sizeof(unnamed));
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    return unnamed;
}

/* Killed between the open and the commit: the old contents, and (where the filesystem
 * gives unnamed files) nothing else. */
START_TEST(test_killed_before_commit) {
    int unnamed = save_killed_midway();
    ck_assert_int_ge(unnamed, 0);
    expect_contents("old");
    if (unnamed)
        ck_assert_msg(entries() == 1, "a killed save left %d files beside the target", entries() - 1);
}
END_TEST

/* A killed save's file, on a filesystem without O_TMPFILE: there, and gone with the next
 * save; a live writer's (locked), and names that are not the target's temporary files,
 * stay. */
START_TEST(test_leftovers_removed) {
    no_tmpfile = 1;
    ck_assert_msg(save_killed_midway() == 0 && entries() == 2, "no named temporary file left by the killed save");
    atomic_file live;
    open_and_write(&live, "unsaved"); /* another writer, at work */
    char ours[128], name[160];        /* ".file.ddp-HOST.", as this host's writers name theirs */
    const char *live_name = live.tmp + strlen(dir) + 1;
    snprintf(ours, sizeof(ours), "%.*s", (int)(strlen(live_name) - 6), live_name);
    snprintf(name, sizeof(name), "%slive00", ours);
    int held = make_beside(name, true);
    ck_assert_int_eq(flock(held, LOCK_EX), 0); /* a writer at work, of another process */
    snprintf(name, sizeof(name), "%stoolong", ours);
    make_beside(name, false);
    make_beside(".file.abc123", false);               /* rsync's, say */
    make_beside(".file.ddp-elsewhere.abc123", false); /* another host's (NFS without shared locks) */
    make_beside(".other.ddp-host.abc123", false);
    char link[256];
    snprintf(link, sizeof(link), "%s/%slink00", dir, ours);
    ck_assert_int_eq(symlink(path, link), 0);
    atomic_file f;
    char err[256] = "";
    open_and_write(&f, "new");
    ck_assert_msg(atomic_file_commit(&f, "--test", err, sizeof(err)) == 0, "%s", err);
    expect_contents("new");
    ck_assert(exists_beside(live_name) && exists_beside(".file.abc123") &&
              exists_beside(".file.ddp-elsewhere.abc123") && exists_beside(".other.ddp-host.abc123"));
    ck_assert_int_eq(entries(), 8); /* the killed save's is gone */
    atomic_file_abort(&live);
    close(held);
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("atomic_file");
    TCase *tc = tcase_create("atomic_file");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_commit);
    tcase_add_test(tc, test_directory_sync_fails);
    tcase_add_test(tc, test_file_sync_fails);
    tcase_add_test(tc, test_abort);
    tcase_add_test(tc, test_killed_before_commit);
    tcase_add_test(tc, test_leftovers_removed);
    suite_add_tcase(s, tc);
    return check_main(s, argc, argv);
}
