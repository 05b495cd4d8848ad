/* Replacing a file whole (common/atomic_file.h): the commit puts the new contents in place
 * and nothing else in the directory; an abort, or a process killed before its commit,
 * leaves the old contents and no stray file (unnamed until the commit, O_TMPFILE). */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    unlink(path);
    rmdir(dir);
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

/* Killed between the open and the commit: the old contents, and (where the filesystem
 * gives unnamed files) nothing else. */
START_TEST(test_killed_before_commit) {
    int pipe_fds[2];
    ck_assert_int_eq(pipe(pipe_fds), 0);
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        atomic_file f;
        char err[256];
        int unnamed = atomic_file_open(&f, path, 0600, "--test", err, sizeof(err)) == 0 && write(f.fd, "new", 3) == 3 &&
                      f.unnamed;
        if (write(pipe_fds[1], &unnamed, sizeof(unnamed)) != (ssize_t)sizeof(unnamed))
            _exit(2);
        _exit(0); /* as SIGKILL would: no commit, no abort */
    }
    int unnamed = 0, status = 0;
    ck_assert_int_eq(read(pipe_fds[0], &unnamed, sizeof(unnamed)), (ssize_t)sizeof(unnamed));
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    expect_contents("old");
    if (unnamed)
        ck_assert_msg(entries() == 1, "a killed save left %d files beside the target", entries() - 1);
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
    suite_add_tcase(s, tc);
    return check_main(s, argc, argv);
}
