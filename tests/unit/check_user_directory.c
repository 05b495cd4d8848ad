/* ddpd's user directory (server/user_directory.h): this machine's users and groups, and a
 * directory that does not answer. This program's getpwuid_r, getpwnam_r and getgrnam_r
 * stand in for libc's (the executable's symbols win) and pass each question on, unless a
 * test has closed the gate: then they wait until it opens, as NSS does when LDAP is down. */
#define _GNU_SOURCE /* RTLD_NEXT */
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "server/user_directory.h"
#include "tests/check_main.h"

#define WAIT_MS 20

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_opened = PTHREAD_COND_INITIALIZER;
static bool gate_closed;
static int asked; /* questions that reached NSS, or the closed gate */

static void gate_pass(void) {
    pthread_mutex_lock(&gate_lock);
    asked++;
    while (gate_closed)
        pthread_cond_wait(&gate_opened, &gate_lock);
    pthread_mutex_unlock(&gate_lock);
}

static void gate_set(bool closed) {
    pthread_mutex_lock(&gate_lock);
    gate_closed = closed;
    pthread_cond_broadcast(&gate_opened);
    pthread_mutex_unlock(&gate_lock);
}

static int asked_so_far(void) {
    pthread_mutex_lock(&gate_lock);
    int n = asked;
    pthread_mutex_unlock(&gate_lock);
    return n;
}

int getpwuid_r(uid_t uid, struct passwd *pw, char *buf, size_t size, struct passwd **ret) {
    gate_pass();
    int (*real)(uid_t, struct passwd *, char *, size_t, struct passwd **) = dlsym(RTLD_NEXT, "getpwuid_r");
    return real(uid, pw, buf, size, ret);
}

int getpwnam_r(const char *name, struct passwd *pw, char *buf, size_t size, struct passwd **ret) {
    gate_pass();
    int (*real)(const char *, struct passwd *, char *, size_t, struct passwd **) = dlsym(RTLD_NEXT, "getpwnam_r");
    return real(name, pw, buf, size, ret);
}

int getgrnam_r(const char *name, struct group *gr, char *buf, size_t size, struct group **ret) {
    gate_pass();
    int (*real)(const char *, struct group *, char *, size_t, struct group **) = dlsym(RTLD_NEXT, "getgrnam_r");
    return real(name, gr, buf, size, ret);
}

/* root's name, polled until the directory has it (the gate open), for at most 10 s. */
static int name_of_root(user_directory *d, char *buf, size_t size) {
    int r = -ETIMEDOUT;
    for (uint64_t until = clock_now_ms() + 10000; r == -ETIMEDOUT && clock_now_ms() < until; usleep(1000))
        r = user_directory_name(d, 0, buf, size);
    return r;
}

START_TEST(test_answers) {
    user_directory *d;
    ck_assert_int_eq(user_directory_open(&d, 5000, 60000), 0);
    uid_t uid = 1;
    char name[64] = "";
    ck_assert_int_eq(user_directory_uid(d, "root", &uid), 0);
    ck_assert_int_eq(uid, 0);
    ck_assert_int_eq(user_directory_name(d, 0, name, sizeof(name)), 0);
    ck_assert_str_eq(name, "root");
    ck_assert_int_eq(user_directory_in_group(d, 0, "root"), 1);           /* its primary group */
    ck_assert_int_eq(user_directory_in_group(d, 65534, "root"), 0);       /* nobody */
    ck_assert_int_eq(user_directory_in_group(d, 0, "no-such-group"), 0);  /* a group of no name */
    ck_assert_int_eq(user_directory_in_group(d, 4000000000u, "root"), 0); /* a uid of no user */
    ck_assert_int_eq(user_directory_uid(d, "no-such-user", &uid), -ENOENT);
    ck_assert_int_eq(user_directory_name(d, 4000000000u, name, sizeof(name)), -ENOENT);
    char too_long[300];
    memset(too_long, 'a', sizeof(too_long) - 1);
    too_long[sizeof(too_long) - 1] = '\0';
    ck_assert_int_eq(user_directory_uid(d, too_long, &uid), -ENOENT);
    ck_assert_int_eq(user_directory_uid(d, "", &uid), -ENOENT);

    unsigned long lookups = user_directory_lookups(d); /* asked again: answered from what it keeps */
    ck_assert_int_eq(user_directory_uid(d, "root", &uid), 0);
    ck_assert_int_eq(user_directory_name(d, 0, name, sizeof(name)), 0);
    ck_assert_int_eq(user_directory_uid(d, "no-such-user", &uid), -ENOENT);
    ck_assert_uint_eq(user_directory_lookups(d), lookups);
    user_directory_close(d);
}
END_TEST

/* NSS does not answer: the first question waits WAIT_MS, the next ones (the thread is
 * busy) not at all; once it answers, both are known. */
START_TEST(test_directory_does_not_answer) {
    user_directory *d;
    ck_assert_int_eq(user_directory_open(&d, WAIT_MS, 60000), 0);
    gate_set(true);
    char name[64];
    uint64_t start = clock_now_ms();
    ck_assert_int_eq(user_directory_name(d, 0, name, sizeof(name)), -ETIMEDOUT);
    ck_assert_uint_ge(clock_now_ms() - start, WAIT_MS - 1);
    uid_t uid;
    int before = asked_so_far();
    ck_assert_int_eq(user_directory_uid(d, "root", &uid), -ETIMEDOUT);           /* queued behind it, not waited for */
    ck_assert_int_eq(user_directory_in_group(d, 0, "root"), -ETIMEDOUT);         /* the same */
    ck_assert_int_eq(user_directory_name(d, 0, name, sizeof(name)), -ETIMEDOUT); /* still being asked: once */
    ck_assert_int_eq(asked_so_far(), before);
    gate_set(false);
    ck_assert_int_eq(name_of_root(d, name, sizeof(name)), 0);
    ck_assert_str_eq(name, "root");
    int r = -ETIMEDOUT;
    for (uint64_t until = clock_now_ms() + 10000; r == -ETIMEDOUT && clock_now_ms() < until; usleep(1000))
        r = user_directory_in_group(d, 0, "root");
    ck_assert_int_eq(r, 1);
    ck_assert_int_eq(user_directory_uid(d, "root", &uid), 0);
    ck_assert_int_eq(uid, 0);
    user_directory_close(d);
}
END_TEST

/* An answer past its time serves at once while it is asked again, even when NSS hangs. */
START_TEST(test_refreshed_in_the_background) {
    user_directory *d;
    ck_assert_int_eq(user_directory_open(&d, WAIT_MS, 50), 0);
    char name[64];
    ck_assert_int_eq(name_of_root(d, name, sizeof(name)), 0);
    unsigned long lookups = user_directory_lookups(d);
    usleep(100 * 1000);
    gate_set(true);
    int before = asked_so_far();
    uint64_t start = clock_now_ms();
    ck_assert_int_eq(user_directory_name(d, 0, name, sizeof(name)), 0); /* the old answer, not waited for */
    ck_assert_uint_lt(clock_now_ms() - start, WAIT_MS);
    ck_assert_str_eq(name, "root");
    for (uint64_t until = clock_now_ms() + 10000; asked_so_far() == before && clock_now_ms() < until;)
        usleep(1000);
    ck_assert_int_eq(asked_so_far(), before + 1); /* asked again */
    gate_set(false);
    for (uint64_t until = clock_now_ms() + 10000; user_directory_lookups(d) == lookups && clock_now_ms() < until;)
        usleep(1000);
    ck_assert_uint_eq(user_directory_lookups(d), lookups + 1);
    user_directory_close(d);
}
END_TEST

/* Closed while NSS hangs: the close returns; the thread ends once NSS answers. */
START_TEST(test_closed_while_asking) {
    user_directory *d;
    ck_assert_int_eq(user_directory_open(&d, WAIT_MS, 60000), 0);
    gate_set(true);
    char name[64];
    ck_assert_int_eq(user_directory_name(d, 0, name, sizeof(name)), -ETIMEDOUT);
    user_directory_close(d);
    gate_set(false);
    usleep(100 * 1000); /* the thread frees what was the directory */
}
END_TEST

/* NSS hangs while 300 new questions come: 256 wait for it, the rest are asked later. */
START_TEST(test_queue_bounded) {
    user_directory *d;
    ck_assert_int_eq(user_directory_open(&d, WAIT_MS, 60000), 0);
    gate_set(true);
    char name[64];
    ck_assert_int_eq(user_directory_name(d, 0, name, sizeof(name)), -ETIMEDOUT); /* being asked */
    uid_t uid;
    for (int i = 0; i < 300; i++) {
        snprintf(name, sizeof(name), "made-up-%d", i);
        ck_assert_int_eq(user_directory_uid(d, name, &uid), -ETIMEDOUT);
    }
    gate_set(false);
    for (uint64_t until = clock_now_ms() + 10000; user_directory_lookups(d) < 257 && clock_now_ms() < until;)
        usleep(1000);
    usleep(50 * 1000);
    ck_assert_uint_eq(user_directory_lookups(d), 257); /* root's, and 256 of the names */
    int r = -ETIMEDOUT;                                /* asked now (the loop's wait for it spent already: polled) */
    for (uint64_t until = clock_now_ms() + 10000; r == -ETIMEDOUT && clock_now_ms() < until; usleep(1000))
        r = user_directory_uid(d, "made-up-299", &uid);
    ck_assert_int_eq(r, -ENOENT);
    user_directory_close(d);
}
END_TEST

/* Made-up names by the thousand: each answered, none kept past the bound. */
START_TEST(test_many_names) {
    user_directory *d;
    ck_assert_int_eq(user_directory_open(&d, 5000, 60000), 0);
    for (int i = 0; i < 5000; i++) {
        char name[32];
        uid_t uid;
        snprintf(name, sizeof(name), "made-up-%d", i);
        ck_assert_int_eq(user_directory_uid(d, name, &uid), -ENOENT);
    }
    uid_t uid = 1;
    ck_assert_int_eq(user_directory_uid(d, "root", &uid), 0);
    ck_assert_int_eq(uid, 0);
    user_directory_close(d);
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("user_directory");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_answers);
    tcase_add_test(tc, test_directory_does_not_answer);
    tcase_add_test(tc, test_refreshed_in_the_background);
    tcase_add_test(tc, test_closed_while_asking);
    tcase_add_test(tc, test_queue_bounded);
    tcase_add_test(tc, test_many_names);
    suite_add_tcase(s, tc);
    return check_main(s, argc, argv);
}
