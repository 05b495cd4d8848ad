/* The segments ranks hand each other: what shm_segment_make makes is mapped; anything a
 * peer could hand over in its place (a file, a pipe, a memfd of another size, unsealed, or
 * sealed against writing) is refused, saying why, and never mapped. */
#define _GNU_SOURCE /* memfd_create, the F_SEAL_* flags */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/shm_segment.h"
#include "tests/check_main.h"

#define BYTES (64 * 1024)

/* Maps fd as a segment of BYTES: expects refusal naming needle. */
static void expect_refused(int fd, const char *needle) {
    char why[128] = "", *m = NULL;
    int r = shm_segment_map(fd, BYTES, &m, why, sizeof(why));
    ck_assert_msg(r < 0, "mapped what should be refused (%s)", needle);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(why, needle), "expected '%s' in '%s'", needle, why);
    close(fd);
}

static int memfd(size_t bytes, unsigned seals) {
    int fd = memfd_create("test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)bytes), 0);
    if (seals)
        ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, seals), 0);
    return fd;
}

START_TEST(test_made_is_mapped) {
    int fd = -1;
    ck_assert_int_eq(shm_segment_make("test", BYTES, &fd), 0);
    char why[128] = "", *a = NULL, *b = NULL;
    ck_assert_int_eq(shm_segment_map(fd, BYTES, &a, why, sizeof(why)), 0);
    ck_assert_int_eq(shm_segment_map(fd, BYTES, &b, why, sizeof(why)), 0);
    a[BYTES - 1] = 42; /* two mappings of one segment: what one writes, the other reads */
    ck_assert_int_eq(b[BYTES - 1], 42);
    /* its owner cannot shrink it under the peers, nor unseal it */
    ck_assert_int_lt(ftruncate(fd, BYTES / 2), 0);
    ck_assert_int_lt(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), 0);
    munmap(a, BYTES);
    munmap(b, BYTES);
    close(fd);
}
END_TEST

START_TEST(test_refused) {
    expect_refused(memfd(BYTES, 0), "not sealed against shrinking");
    expect_refused(memfd(BYTES / 2, F_SEAL_SHRINK), "32768 bytes, not a segment's 65536");
    expect_refused(memfd(BYTES * 2, F_SEAL_SHRINK), "131072 bytes");
    expect_refused(memfd(BYTES, F_SEAL_SHRINK | F_SEAL_WRITE), "sealed against writing");
    expect_refused(memfd(BYTES, F_SEAL_SHRINK | F_SEAL_FUTURE_WRITE), "sealed against writing");
    int fd = memfd_create("no-seals", MFD_CLOEXEC); /* sealing not allowed: F_SEAL_SEAL from birth */
    ck_assert_int_eq(ftruncate(fd, BYTES), 0);
    expect_refused(fd, "not sealed against shrinking");

    char path[] = "/tmp/check_shm_segment_XXXXXX"; /* a file: it could be anyone's, and shrink */
    fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    ck_assert_int_eq(ftruncate(fd, BYTES), 0);
    expect_refused(fd, "not a memfd of shared memory (a file elsewhere)");
    int pipes[2];
    ck_assert_int_eq(pipe(pipes), 0);
    close(pipes[1]);
    expect_refused(pipes[0], "not a memfd of shared memory (a pipe or an anonymous inode)");
    /* huge pages: a hole its owner punched faults (SIGBUS) under the reader once the pool
     * is spent (where the kernel has no hugetlbfs there is nothing to refuse) */
    if ((fd = memfd_create("huge", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB)) >= 0) {
        ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
        expect_refused(fd, "not a memfd of shared memory");
    }
    expect_refused(open("/dev/zero", O_RDWR | O_CLOEXEC), "not a memfd of shared memory (a file elsewhere)");
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("shm_segment");
    TCase *tc = tcase_create("shm_segment");
    tcase_add_test(tc, test_made_is_mapped);
    tcase_add_test(tc, test_refused);
    suite_add_tcase(s, tc);
    return check_main(s, argc, argv);
}
