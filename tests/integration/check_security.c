/* A lab machine with two users (issue 14): root's ddpd on a Unix socket, root's job, and
 * an ordinary user (nobody) who tries to join it, abort it and read its members. The
 * kernel names each client (SO_PEERCRED through ZeroMQ's Peer-Address); each user's jobs
 * are that user's, whatever their names. Needs root, to act as the other user (setpriv):
 * skipped elsewhere. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/check_main.h"
#include "tests/integration/harness.h"

#define WAIT_MS 60000
#define OTHER_UID "65534" /* nobody */

static char dir[64], endpoint[128];

static void start_ddpd(ddpd_proc *d) {
    snprintf(dir, sizeof(dir), "/tmp/ddp-security-%d", (int)getpid());
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    snprintf(endpoint, sizeof(endpoint), "ipc://%s/ddpd.sock", dir);
    snprintf(d->endpoint, sizeof(d->endpoint), "%s", endpoint);
    const char *argv[] = {DDPD_PATH, "--listen", endpoint, NULL};
    proc_start(&d->p, argv, NULL);
    ck_assert_msg(proc_expect(&d->p, "listening on ", 10000, NULL, 0), "%s", proc_output(&d->p));
}

/* argv run as the other user, with the rendezvous of rank of job in its environment. */
static void start_as_other(proc *p, int rank, const char *const *argv) {
    char coord[160], rank_env[32];
    snprintf(coord, sizeof(coord), "DDP_COORDINATOR=%s", endpoint);
    snprintf(rank_env, sizeof(rank_env), "RANK=%d", rank);
    const char *full[24] = {"/usr/bin/setpriv", "--reuid=" OTHER_UID, "--regid=" OTHER_UID,
                            "--clear-groups",   "/usr/bin/env",       coord,
                            "WORLD_SIZE=2",     "DDP_JOB=lab",        rank_env};
    size_t n = 9;
    for (size_t i = 0; argv[i] && n < 23; i++)
        full[n++] = argv[i];
    full[n] = NULL;
    proc_start(p, full, NULL);
}

static void ddpctl_as(proc *p, bool other, const char *command, const char *job) {
    const char *mine[] = {DDPCTL_PATH, "--coordinator", endpoint, command, job, NULL};
    if (!other) {
        proc_start(p, mine, NULL);
        return;
    }
    const char *theirs[] = {"/usr/bin/setpriv",
                            "--reuid=" OTHER_UID,
                            "--regid=" OTHER_UID,
                            "--clear-groups",
                            DDPCTL_PATH,
                            "--coordinator",
                            endpoint,
                            command,
                            job,
                            NULL};
    proc_start(p, theirs, NULL);
}

START_TEST(test_other_user) {
    ddpd_proc d;
    start_ddpd(&d);
    proc root0, root1, stranger, ctl;
    const char *barriers[] = {"--barriers", "3", NULL};
    member_start(&root0, &d, 2, 0, "lab", barriers);
    ck_assert(proc_expect(&d.p, "joined (1/2)", WAIT_MS, NULL, 0));

    /* the other user cannot abort root's job, and sees it without its members */
    ddpctl_as(&ctl, true, "abort", "lab");
    ck_assert_int_ne(proc_wait(&ctl, WAIT_MS), 0);
    ck_assert_msg(strstr(proc_output(&ctl), "job 'lab' belongs to user root: refused"), "%s", proc_output(&ctl));
    proc_close(&ctl);
    ddpctl_as(&ctl, true, "status", NULL);
    ck_assert_int_eq(proc_wait(&ctl, WAIT_MS), 0);
    ck_assert_msg(strstr(proc_output(&ctl), "job 'lab' of user root: forming, 1/2 members") &&
                      strstr(proc_output(&ctl), "members withheld"),
                  "%s", proc_output(&ctl));
    char pid[32];
    snprintf(pid, sizeof(pid), " %d ", (int)root0.pid);
    ck_assert_msg(!strstr(proc_output(&ctl), pid), "root's pid shown to another user: %s", proc_output(&ctl));
    proc_close(&ctl);

    /* its rank 1 of 'lab' joins its own job of that name, not root's */
    const char *member[] = {MEMBER_PATH, "--barriers", "1", NULL};
    start_as_other(&stranger, 1, member);
    ck_assert(proc_expect(&d.p, "joined (1/2)", WAIT_MS, NULL, 0)); /* a second job, one member */
    member_start(&root1, &d, 2, 1, "lab", barriers);
    ck_assert_msg(proc_wait(&root0, WAIT_MS) == 0, "%s", proc_output(&root0));
    ck_assert_msg(proc_wait(&root1, WAIT_MS) == 0, "%s", proc_output(&root1));
    ck_assert_msg(strstr(proc_output(&root0), "barrier 2 ok"), "%s", proc_output(&root0));

    /* root sees every job whole; the other user's abort of 'lab' is its own job's end */
    ddpctl_as(&ctl, false, "status", NULL);
    ck_assert_int_eq(proc_wait(&ctl, WAIT_MS), 0);
    ck_assert_msg(strstr(proc_output(&ctl), "job 'lab' of user nobody: forming, 1/2 members") &&
                      !strstr(proc_output(&ctl), "withheld"),
                  "%s", proc_output(&ctl));
    proc_close(&ctl);
    ddpctl_as(&ctl, true, "abort", "lab");
    ck_assert_msg(proc_wait(&ctl, WAIT_MS) == 0, "%s", proc_output(&ctl));
    proc_close(&ctl);
    ck_assert_int_ne(proc_wait(&stranger, WAIT_MS), 0);
    ck_assert_msg(strstr(proc_output(&stranger), "aborted by an operator"), "%s", proc_output(&stranger));
    proc_close(&stranger);
    proc_close(&root0);
    proc_close(&root1);
    ck_assert_int_eq(ddpd_stop(&d), 0);
    rmdir(dir);
}
END_TEST

int main(int argc, char **argv) {
    if (geteuid() != 0)
        return check_skip("other-user", "acting as another user needs root (setpriv)");
    Suite *s = suite_create("security");
    TCase *tc = tcase_create("other-user");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_other_user);
    suite_add_tcase(s, tc);
    return check_main(s, argc, argv);
}
