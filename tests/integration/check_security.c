/* A lab machine with two users (issue 14): root's ddpd on a Unix socket, root's job, and
 * an ordinary user (nobody) who tries to join it, abort it and read its members. The
 * kernel names each client (SO_PEERCRED through ZeroMQ's Peer-Address); each user's jobs
 * are that user's, whatever their names. Needs root, to act as the other user (setpriv):
 * skipped elsewhere. */
#define _GNU_SOURCE /* unshare */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/data_plane.h"
#include "common/fd_socket.h"
#include "common/ps_segment.h"
#include "common/shm_segment.h"
#include "common/wire.h"
#include "tests/check_main.h"
#include "tests/integration/harness.h"
#include "worker/libddp/comm.h"

#define WAIT_MS 60000
#define OTHER_UID "65534" /* nobody */

static char dir[64], endpoint[128];

/* root's ddpd on a Unix socket of its own, with one more flag (and its value) if given. */
static void start_ddpd(ddpd_proc *d, const char *flag, const char *value) {
    snprintf(dir, sizeof(dir), "/tmp/ddp-security-%d", (int)getpid());
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    snprintf(endpoint, sizeof(endpoint), "ipc://%s/ddpd.sock", dir);
    snprintf(d->endpoint, sizeof(d->endpoint), "%s", endpoint);
    const char *argv[] = {DDPD_PATH, "--listen", endpoint, flag, value, NULL};
    proc_start(&d->p, argv, NULL);
    ck_assert_msg(proc_expect(&d->p, "listening on ", 10000, NULL, 0), "%s", proc_output_tail(&d->p));
}

static void stop_ddpd(ddpd_proc *d) {
    ck_assert_int_eq(ddpd_stop(d), 0);
    rmdir(dir);
}

/* argv run as user uid, with the rendezvous of rank of job 'lab' in its environment. */
static void start_as(proc *p, const char *uid, int rank, const char *const *argv) {
    char coord[160], rank_env[32], reuid[32], regid[32];
    snprintf(coord, sizeof(coord), "DDP_COORDINATOR=%s", endpoint);
    snprintf(rank_env, sizeof(rank_env), "RANK=%d", rank);
    snprintf(reuid, sizeof(reuid), "--reuid=%s", uid);
    snprintf(regid, sizeof(regid), "--regid=%s", uid);
    const char *full[24] = {"/usr/bin/setpriv", reuid,         regid,   "--clear-groups", "/usr/bin/env", coord,
                            "WORLD_SIZE=2",     "DDP_JOB=lab", rank_env};
    size_t n = 9;
    for (size_t i = 0; argv[i] && n < 23; i++)
        full[n++] = argv[i];
    full[n] = NULL;
    proc_start(p, full, NULL);
}

/* argv run as the other user (nobody). */
static void start_as_other(proc *p, int rank, const char *const *argv) {
    start_as(p, OTHER_UID, rank, argv);
}

/* ddpctl COMMAND JOB as root or as the other user, with --owner OWNER unless NULL. */
static void ddpctl_owner_as(proc *p, bool other, const char *owner, const char *command, const char *job) {
    const char *argv[16] = {"/usr/bin/setpriv", "--reuid=" OTHER_UID, "--regid=" OTHER_UID, "--clear-groups"};
    size_t n = other ? 4 : 0; /* root runs ddpctl itself */
    argv[n++] = DDPCTL_PATH;
    argv[n++] = "--coordinator";
    argv[n++] = endpoint;
    if (owner) {
        argv[n++] = "--owner";
        argv[n++] = owner;
    }
    argv[n++] = command;
    argv[n++] = job; /* NULL (status): the end */
    argv[n] = NULL;
    proc_start(p, argv, NULL);
}

static void ddpctl_as(proc *p, bool other, const char *command, const char *job) {
    ddpctl_owner_as(p, other, NULL, command, job);
}

START_TEST(test_other_user) {
    ddpd_proc d;
    start_ddpd(&d, NULL, NULL);
    proc root0, root1, stranger, ctl;
    const char *barriers[] = {"--barriers", "3", NULL};
    member_start(&root0, &d, 2, 0, "lab", barriers);
    ck_assert(proc_expect(&d.p, "joined (1/2)", WAIT_MS, NULL, 0));

    /* the other user cannot abort root's job, and sees it without its members */
    ddpctl_as(&ctl, true, "abort", "lab");
    ck_assert_int_ne(proc_wait(&ctl, WAIT_MS), 0);
    ck_assert_msg(strstr(proc_output(&ctl), "job 'lab' belongs to user root: refused"), "%s", proc_output_tail(&ctl));
    proc_close(&ctl);
    ddpctl_as(&ctl, true, "status", NULL);
    ck_assert_int_eq(proc_wait(&ctl, WAIT_MS), 0);
    ck_assert_msg(strstr(proc_output(&ctl), "job 'lab' of user root: forming, 1/2 members") &&
                      strstr(proc_output(&ctl), "members withheld"),
                  "%s", proc_output_tail(&ctl));
    char pid[32];
    snprintf(pid, sizeof(pid), " %d ", (int)root0.pid);
    ck_assert_msg(!strstr(proc_output(&ctl), pid), "root's pid shown to another user: %s", proc_output_tail(&ctl));
    proc_close(&ctl);

    /* its rank 1 of 'lab' joins its own job of that name, not root's */
    const char *member[] = {MEMBER_PATH, "--barriers", "1", NULL};
    start_as_other(&stranger, 1, member);
    ck_assert(proc_expect(&d.p, "joined (1/2)", WAIT_MS, NULL, 0)); /* a second job, one member */
    member_start(&root1, &d, 2, 1, "lab", barriers);
    ck_assert_msg(proc_wait(&root0, WAIT_MS) == 0, "%s", proc_output_tail(&root0));
    ck_assert_msg(proc_wait(&root1, WAIT_MS) == 0, "%s", proc_output_tail(&root1));
    ck_assert_msg(strstr(proc_output(&root0), "barrier 2 ok"), "%s", proc_output_tail(&root0));

    /* root sees every job whole; the other user's abort of 'lab' is its own job's end */
    ddpctl_as(&ctl, false, "status", NULL);
    ck_assert_int_eq(proc_wait(&ctl, WAIT_MS), 0);
    ck_assert_msg(strstr(proc_output(&ctl), "job 'lab' of user nobody: forming, 1/2 members") &&
                      !strstr(proc_output(&ctl), "withheld"),
                  "%s", proc_output_tail(&ctl));
    proc_close(&ctl);
    ddpctl_as(&ctl, true, "abort", "lab");
    ck_assert_msg(proc_wait(&ctl, WAIT_MS) == 0, "%s", proc_output_tail(&ctl));
    proc_close(&ctl);
    ck_assert_int_ne(proc_wait(&stranger, WAIT_MS), 0);
    ck_assert_msg(strstr(proc_output(&stranger), "aborted by an operator"), "%s", proc_output_tail(&stranger));
    proc_close(&stranger);
    proc_close(&root0);
    proc_close(&root1);
    stop_ddpd(&d);
}
END_TEST

/* Hands a push segment to a ps job's socket as rank: 0 when ddpd answers with the average
 * segment, else the error. */
static int hand_push_segment(const char *socket_name, int rank) {
    int fd = -1, sock = -1, average = -1;
    int32_t tag = -1;
    int r = shm_segment_make("test-ps-push", ps_segment_bytes(4 * sizeof(float), 1), &fd); /* the layout's: {4} */
    if (r == 0 && (r = fd_socket_connect(socket_name, &sock)) == 0 && (r = fd_socket_send(sock, fd, rank)) == 0)
        r = fd_socket_recv(sock, clock_now_ms() + 5000, &average, &tag);
    if (average >= 0)
        close(average);
    if (sock >= 0)
        close(sock);
    if (fd >= 0)
        close(fd);
    return r;
}

/* root's ps job on root's ddpd: another user who connects to its push-segment socket (its
 * name is in /proc/net/unix for all to see) is refused at once, before ddpd waits for it
 * to say anything, and the rank itself still hands its segment over. */
/* Two users (nobody, daemon) each with a job 'lab': root's `ddpctl abort lab`, which has
 * none of its own, does not pick one (it ended whichever came first), but asks whose;
 * `--owner daemon` ends daemon's, nobody's goes on; nobody may not name daemon's, nor a
 * user that does not exist, but may name itself. */
START_TEST(test_abort_names_the_owner) {
    ddpd_proc d;
    start_ddpd(&d, NULL, NULL);
    proc theirs[2], ctl;
    const char *member[] = {MEMBER_PATH, "--barriers", "1", NULL};
    start_as(&theirs[0], OTHER_UID, 0, member);
    ck_assert(proc_expect(&d.p, "joined (1/2)", WAIT_MS, NULL, 0));
    start_as(&theirs[1], "1", 0, member); /* daemon */
    ck_assert(proc_expect(&d.p, "joined (1/2)", WAIT_MS, NULL, 0));
    ddpctl_as(&ctl, false, "abort", "lab");
    ck_assert_int_ne(proc_wait(&ctl, WAIT_MS), 0);
    ck_assert_msg(strstr(proc_output(&ctl), "2 users have a job 'lab': say whose (ddpctl abort --owner USER lab"), "%s",
                  proc_output_tail(&ctl));
    proc_close(&ctl);
    ddpctl_owner_as(&ctl, true, "daemon", "abort", "lab");
    ck_assert_int_ne(proc_wait(&ctl, WAIT_MS), 0);
    ck_assert_msg(strstr(proc_output(&ctl), "only root and operators end another's"), "%s", proc_output_tail(&ctl));
    proc_close(&ctl);
    ddpctl_owner_as(&ctl, false, "daemon", "abort", "lab");
    ck_assert_msg(proc_wait(&ctl, WAIT_MS) == 0, "%s", proc_output_tail(&ctl));
    proc_close(&ctl);
    ck_assert_int_ne(proc_wait(&theirs[1], WAIT_MS), 0);
    ck_assert_msg(strstr(proc_output(&theirs[1]), "aborted by an operator"), "%s", proc_output_tail(&theirs[1]));
    ddpctl_as(&ctl, false, "status", NULL); /* nobody's still forms */
    ck_assert_int_eq(proc_wait(&ctl, WAIT_MS), 0);
    ck_assert_msg(strstr(proc_output(&ctl), "job 'lab' of user nobody: forming, 1/2 members"), "%s",
                  proc_output_tail(&ctl));
    proc_close(&ctl);
    /* nobody may name no one but itself (a name it makes up is not looked up for it) */
    ddpctl_owner_as(&ctl, true, "no-such-user", "abort", "lab");
    ck_assert_int_ne(proc_wait(&ctl, WAIT_MS), 0);
    ck_assert_msg(strstr(proc_output(&ctl), "only root and operators end another's"), "%s", proc_output_tail(&ctl));
    proc_close(&ctl);
    ddpctl_owner_as(&ctl, true, "nobody", "abort", "lab");
    ck_assert_msg(proc_wait(&ctl, WAIT_MS) == 0, "%s", proc_output_tail(&ctl));
    proc_close(&ctl);
    ck_assert_int_ne(proc_wait(&theirs[0], WAIT_MS), 0);
    ck_assert_msg(strstr(proc_output(&theirs[0]), "aborted by an operator"), "%s", proc_output_tail(&theirs[0]));
    for (int i = 0; i < 2; i++)
        proc_close(&theirs[i]);
    stop_ddpd(&d);
}
END_TEST

/* A ps job of two ranks on root's ddpd, both of them this process, with a layout of {4}:
 * their connections in members, and the socket ddpd takes push segments on. */
static void ps_job_of_this_process(void *ctx, const char *job, void *members[2],
                                   char socket_name[FD_SOCKET_NAME_BYTES]) {
    const uint64_t layout[] = {4};
    for (int r = 0; r < 2; r++)
        members[r] = raw_ps_join(ctx, endpoint, job, r, layout, 1, (uint32_t)getpid());
    for (int r = 0; r < 2; r++) {
        wire_msg msg;
        ck_assert_int_eq(raw_next(members[r], WAIT_MS, &msg), 0);
        ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__WELCOME);
        ck_assert_msg(msg.env->welcome->ps_socket && msg.env->welcome->ps_socket[0], "no ps socket in the Welcome");
        snprintf(socket_name, FD_SOCKET_NAME_BYTES, "%s", msg.env->welcome->ps_socket);
        wire_msg_close(&msg);
    }
}

START_TEST(test_ps_segment_of_another_user) {
    ddpd_proc d;
    start_ddpd(&d, NULL, NULL);
    void *ctx = zmq_ctx_new();
    void *members[2];
    char socket_name[FD_SOCKET_NAME_BYTES] = "";
    ps_job_of_this_process(ctx, "ps-lab", members, socket_name);
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
            _exit(3);
        _exit(hand_push_segment(socket_name, 0) < 0 ? 0 : 1);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the other user's handover: status %d", status);
    ck_assert_msg(
        proc_expect(&d.p, "of uid 65534 is no rank of this job: refused before it said a word", WAIT_MS, NULL, 0), "%s",
        proc_output_tail(&d.p));
    ck_assert_int_eq(hand_push_segment(socket_name, 0), 0);
    for (int r = 0; r < 2; r++)
        zmq_close(members[r]);
    zmq_ctx_term(ctx);
    stop_ddpd(&d);
}
END_TEST

/* The descriptors process pid holds. */
static size_t open_fds(pid_t pid) {
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *dir_fds = opendir(path);
    ck_assert_ptr_nonnull(dir_fds);
    size_t n = 0;
    for (struct dirent *e; (e = readdir(dir_fds));)
        n += e->d_name[0] != '.';
    closedir(dir_fds);
    return n;
}

/* A connection to the abstract socket name, waiting at most timeout_ms while its backlog
 * is full: the socket, or -1 (or refused: no one listens any more). */
static int connect_within(const char *name, int timeout_ms) {
    for (uint64_t until = clock_now_ms() + (uint64_t)timeout_ms;; usleep(10 * 1000)) {
        int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        struct sockaddr_un addr = {.sun_family = AF_UNIX};
        memcpy(addr.sun_path + 1, name, strlen(name));
        socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name));
        ck_assert_int_ge(sock, 0);
        if (connect(sock, (struct sockaddr *)&addr, len) == 0)
            return sock;
        int error = errno;
        close(sock);
        if (error == ECONNREFUSED)
            return -1;
        ck_assert_int_eq(error, EAGAIN); /* the backlog is full */
        if (clock_now_ms() >= until)
            return -1;
    }
}

#define STALL_STEP_MS 15000 /* each step of it, at most: four of them stay under the case's 120 s */

/* A rank of root's ps job that hands ddpd, as its push segment, a file on a FUSE mount that
 * then stops answering anyone but this test (fstat, fstatfs and close would wait for good,
 * only SIGKILL ending the wait): refused from /proc alone, never asked, and closed on a
 * thread of its own, whose close waits; ddpd's loop goes on (it answers a status request).
 * Handed over 100 times more, the file is held open in ddpd at most PS_SHM_MAX_CLOSING
 * times: past that, ddpd takes no connection, and says so. The mount is in a namespace of the test's own, gone with it
 * whatever happens. While this process holds the file it starts no other: an exec would close it, and wait too. */
START_TEST(test_ps_segment_on_a_stalled_mount) {
    ck_assert_int_eq(unshare(CLONE_NEWNS), 0); /* before any thread: ZeroMQ's come later */
    ck_assert_int_eq(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), 0);
    char mount_dir[] = "/tmp/check_security_fuse_XXXXXX", spared[16];
    ck_assert_ptr_nonnull(mkdtemp(mount_dir));
    snprintf(spared, sizeof(spared), "%d", (int)getpid());
    /* killed with this process whatever ends it: the mount, in its namespace, goes too */
    const char *fs[] = {"/usr/bin/setpriv", "--pdeathsig", "KILL", "/usr/bin/python3",
                        FUSE_STALL_PATH,    mount_dir,     spared, NULL};
    proc server;
    proc_start(&server, fs, NULL);
    ck_assert_msg(proc_expect(&server, "mounted", STALL_STEP_MS, NULL, 0), "%s", proc_output_tail(&server));
    ddpd_proc d;
    start_ddpd(&d, NULL, NULL);
    void *ctx = zmq_ctx_new();
    void *members[2];
    char socket_name[FD_SOCKET_NAME_BYTES] = "";
    ps_job_of_this_process(ctx, "ps-fuse", members, socket_name);

    char path[96];
    snprintf(path, sizeof(path), "%s/segment", mount_dir);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    snprintf(path, sizeof(path), "%s/stall", mount_dir);
    struct stat st;
    ck_assert_int_lt(stat(path, &st), 0); /* from now on it answers no one else */
    int sock = -1;
    ck_assert_int_eq(fd_socket_connect(socket_name, &sock), 0);
    ck_assert_int_eq(fd_socket_send(sock, fd, 0), 0);
    close(fd); /* spared: it answers this process */
    ck_assert_msg(proc_expect(&d.p, "rank 0's push segment is refused: not a memfd of shared memory (a file elsewhere)",
                              STALL_STEP_MS, NULL, 0),
                  "%s", proc_output_tail(&d.p));
    ck_assert_msg(proc_expect(&server, " waits in flush", STALL_STEP_MS, NULL, 0), "ddpd's close was never held: %s",
                  proc_output_tail(&server)); /* by one of its threads: this process is spared */
    Ddp__StatusRequest body = DDP__STATUS_REQUEST__INIT;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__STATUS_REQUEST, "", -1, 0, 77);
    env.status_request = &body;
    void *ask = raw_connect(ctx, endpoint);
    wire_msg msg = {0};
    ck_assert_int_eq(raw_request(ask, &env, STALL_STEP_MS, &msg), 0);
    ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__STATUS_REPLY);
    wire_msg_close(&msg);

    /* the same file, 100 times more: ddpd holds at most PS_SHM_MAX_CLOSING of them open,
     * then takes no more connections (they wait in its backlog, then are refused) */
    snprintf(path, sizeof(path), "%s/segment", mount_dir);
    ck_assert_int_ge(fd = open(path, O_RDWR | O_CLOEXEC), 0);
    size_t before = open_fds(d.p.pid);
    int socks[100], n = 0;
    while (n < 100 && (socks[n] = connect_within(socket_name, 2000)) >= 0)
        fd_socket_send(socks[n++], fd, 0); /* one refused unread may have been closed already */
    ck_assert_msg(n < 100, "ddpd took all 100 connections");
    ck_assert_msg(proc_expect(&d.p, "no push segments are taken until fewer are", STALL_STEP_MS, NULL, 0), "%s",
                  proc_output_tail(&d.p));
    size_t after = open_fds(d.p.pid);
    ck_assert_msg(after <= before + 64, "ddpd holds %zu descriptors more (at most PS_SHM_MAX_CLOSING: 64)",
                  after - before);
    /* the last connection, taken or left in the backlog, is told at once: no answer will come */
    struct pollfd told = {.fd = socks[n - 1], .events = POLLIN};
    ck_assert_int_eq(poll(&told, 1, STALL_STEP_MS), 1);
    char byte;
    ck_assert_int_eq(recv(socks[n - 1], &byte, 1, MSG_DONTWAIT), 0);
    for (int i = 0; i < n; i++)
        close(socks[i]);
    close(fd); /* spared */

    proc_signal(&server, SIGKILL); /* the mount goes with it: ddpd's closing thread's wait ends */
    proc_wait(&server, STALL_STEP_MS);
    proc_close(&server);
    umount2(mount_dir, MNT_DETACH);
    rmdir(mount_dir);
    close(sock);
    zmq_close(ask);
    for (int r = 0; r < 2; r++)
        zmq_close(members[r]);
    zmq_ctx_term(ctx);
    stop_ddpd(&d);
}
END_TEST

/* Whether this machine can serve a FUSE mount for the test: root that may make a mount
 * namespace, /dev/fuse, and Debian's python3-fusepy. */
static bool fuse_usable(void) {
    return geteuid() == 0 && access("/dev/fuse", R_OK | W_OK) == 0 &&
           system("unshare -m true 2>/dev/null && /usr/bin/python3 -c 'import fusepy' 2>/dev/null") == 0;
}

/* A DEALER on root's ddpd with the given ZeroMQ routing id (a member's, taken over). */
static void *dealer_as(void *ctx, const char *id) {
    void *d = zmq_socket(ctx, ZMQ_DEALER);
    ck_assert_ptr_nonnull(d);
    ck_assert_int_eq(wire_socket_setup(d, DDP_MAX_CONTROL_MSG_BYTES), 0);
    ck_assert_int_eq(zmq_setsockopt(d, ZMQ_ROUTING_ID, id, strlen(id)), 0);
    ck_assert_int_eq(zmq_connect(d, endpoint), 0);
    return d;
}

/* Another user who connects with the routing id of one of root's members (ZeroMQ hands a
 * reconnecting id over to the newer connection) is not that member: its Leave is refused,
 * and root's member stays in its job. */
START_TEST(test_routing_id_of_another_user) {
    ddpd_proc d;
    start_ddpd(&d, NULL, NULL);
    const char *id = "root-member-0001";
    void *ctx = zmq_ctx_new();
    void *mine = dealer_as(ctx, id);
    Ddp__Join join = DDP__JOIN__INIT;
    join.data_plane = DDP_DATA_PLANE_VERSION; /* as this build's libddp */
    join.world_size = 2;
    join.rank = 0;
    join.pid = (uint32_t)getpid();
    join.host = (char *)"test";
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__JOIN, "taken", -1, 0, 1);
    env.join = &join;
    ck_assert_int_eq(wire_send(mine, NULL, 0, &env, NULL, 0), 0);
    ck_assert_msg(proc_expect(&d.p, "joined (1/2)", WAIT_MS, NULL, 0), "%s", proc_output_tail(&d.p));
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) { /* a fresh context: the parent's is not the child's to use */
        if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
            _exit(3);
        void *theirs_ctx = zmq_ctx_new();
        void *theirs = dealer_as(theirs_ctx, id);
        Ddp__Leave leave = DDP__LEAVE__INIT;
        Ddp__Envelope out;
        wire_envelope_init(&out, DDP__MSG_TYPE__LEAVE, "taken", 0, 0, 2);
        out.leave = &leave;
        wire_msg msg;
        int refused = raw_request(theirs, &out, WAIT_MS, &msg) == 0 && msg.env->type == DDP__MSG_TYPE__ERROR &&
                      msg.env->error->code == -ENXIO;
        zmq_close(theirs);
        zmq_ctx_term(theirs_ctx);
        _exit(refused ? 0 : 1);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the other user's Leave: status %d: %s", status,
                  proc_output_tail(&d.p));
    ck_assert_msg(!strstr(proc_output(&d.p), "left while forming"), "%s", proc_output_tail(&d.p));
    zmq_close(mine);
    zmq_ctx_term(ctx);
    stop_ddpd(&d);
}
END_TEST

/* While root is over a quota, the other user's job of one member runs to its end. */
static void others_undisturbed(void) {
    proc theirs;
    const char *member[] = {MEMBER_PATH, "--barriers", "3", NULL};
    char coord[160];
    snprintf(coord, sizeof(coord), "DDP_COORDINATOR=%s", endpoint);
    const char *argv[] = {"/usr/bin/setpriv",
                          "--reuid=" OTHER_UID,
                          "--regid=" OTHER_UID,
                          "--clear-groups",
                          "/usr/bin/env",
                          coord,
                          "WORLD_SIZE=1",
                          "DDP_JOB=theirs",
                          member[0],
                          member[1],
                          member[2],
                          NULL};
    proc_start(&theirs, argv, NULL);
    ck_assert_msg(proc_wait(&theirs, WAIT_MS) == 0 && strstr(proc_output(&theirs), "barrier 2 ok"), "%s",
                  proc_output_tail(&theirs));
    proc_close(&theirs);
}

/* over (a member root started) was refused, saying needle; the other user's job goes on;
 * then hold (root's member that took the quota) and the ddpd go. */
static void refused_by_quota(ddpd_proc *d, proc *over, proc *hold, const char *needle) {
    char line[600];
    ck_assert(proc_expect(over, "init failed", WAIT_MS, line, sizeof(line)));
    ck_assert_msg(strstr(line, needle), "expected '%s' in: %s", needle, line);
    proc_wait(over, WAIT_MS);
    proc_close(over);
    others_undisturbed();
    proc_signal(hold, SIGKILL);
    proc_close(hold);
    stop_ddpd(d);
}

/* Each per-user quota, hit by root and answered with an error that names it. */
START_TEST(test_quotas) {
    ddpd_proc d;
    proc hold, over;
    /* jobs: root holds one (a member that stays), a second is refused */
    start_ddpd(&d, "--user-jobs", "1");
    const char *stay[] = {"--barriers", "2", "--hang-at", "1", NULL};
    member_start(&hold, &d, 1, 0, "one", stay);
    ck_assert(proc_expect(&hold, "barrier 0 ok", WAIT_MS, NULL, 0));
    member_start(&over, &d, 1, 0, "two", NULL);
    refused_by_quota(&d, &over, &hold, "user root's jobs are 1, the most one user may hold (ddpd --user-jobs 1)");

    /* members: a job of two, one member too many */
    start_ddpd(&d, "--user-members", "1");
    member_start(&hold, &d, 2, 0, "pair", NULL);
    ck_assert(proc_expect(&d.p, "joined (1/2)", WAIT_MS, NULL, 0));
    member_start(&over, &d, 2, 1, "pair", NULL);
    refused_by_quota(&d, &over, &hold, "(ddpd --user-members 1)");

    /* store bytes: a key set again counts once (the second set of 600 KB within 1 MB) */
    start_ddpd(&d, "--user-store-mb", "1");
    const char *twice[] = {"--overwrite", "600000", NULL};
    member_start(&hold, &d, 1, 0, "overwrite", twice);
    ck_assert_msg(proc_expect(&hold, "overwrite ok", WAIT_MS, NULL, 0), "%s", proc_output_tail(&hold));
    ck_assert_int_eq(proc_wait(&hold, WAIT_MS), 0);
    proc_close(&hold);
    stop_ddpd(&d);

    /* store bytes, and pending waits: rank 0's set is refused, and of two waits one */
    const char *store_args[] = {"/usr/bin/env", "DDP_TIMEOUT_MS=1500", MEMBER_PATH, "--store", "1", NULL};
    static const struct {
        const char *flag, *value, *needle;
        int rank;
    } stores[] = {{"--user-store-mb", "0.00001", "(ddpd --user-store-mb)", 0},
                  {"--user-store-waits", "1", "(ddpd --user-store-waits 1)", -1}};
    for (size_t k = 0; k < sizeof(stores) / sizeof(stores[0]); k++) {
        start_ddpd(&d, stores[k].flag, stores[k].value);
        proc ranks[2];
        for (int r = 0; r < 2; r++)
            rank_start(&ranks[r], &d, 2, r, "store", store_args);
        bool named = false;
        for (int r = 0; r < 2; r++) {
            proc_wait(&ranks[r], WAIT_MS);
            named = named || strstr(proc_output(&ranks[r]), stores[k].needle);
        }
        ck_assert_msg(named, "%s: neither rank was told: %s\n%s", stores[k].flag, proc_output_tail(&ranks[0]),
                      proc_output_tail(&ranks[1]));
        for (int r = 0; r < 2; r++)
            proc_close(&ranks[r]);
        others_undisturbed();
        stop_ddpd(&d);
    }

    /* ps buffers: a layout of 2^20 floats for two ranks is 12 MB of them */
    start_ddpd(&d, "--user-ps-mb", "1");
    void *ctx = zmq_ctx_new(), *sock = raw_connect(ctx, endpoint);
    uint64_t layout[] = {1u << 20};
    Ddp__Join join = DDP__JOIN__INIT;
    join.data_plane = DDP_DATA_PLANE_VERSION; /* as this build's libddp */
    join.world_size = 2;
    join.rank = 0;
    join.mode = (char *)"ps";
    join.pid = (uint32_t)getpid();
    join.host = (char *)"test";
    join.ps_buckets = layout;
    join.n_ps_buckets = 1;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__JOIN, "ps", -1, 0, 1);
    env.join = &join;
    wire_msg msg;
    ck_assert_int_eq(raw_request(sock, &env, WAIT_MS, &msg), 0);
    ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__REJECT);
    ck_assert_msg(strstr(msg.env->reject->reason, "(ddpd --user-ps-mb 1)"), "%s", msg.env->reject->reason);
    wire_msg_close(&msg);
    zmq_close(sock);
    zmq_ctx_term(ctx);
    others_undisturbed();
    stop_ddpd(&d);
}
END_TEST

/* Runs argv to its end; returns its exit code, its output in out. */
static int run_tool(const char *const *argv, const char *const *env, char *out, size_t size) {
    proc p;
    proc_start(&p, argv, env);
    int code = proc_wait(&p, WAIT_MS);
    snprintf(out, size, "%s", proc_output(&p));
    proc_close(&p);
    return code;
}

/* ddpctl keygen path: the public key (40 characters) into key. */
static void keygen(const char *path, char *key) {
    char out[256];
    const char *argv[] = {DDPCTL_PATH, "keygen", path, NULL};
    ck_assert_msg(run_tool(argv, NULL, out, sizeof(out)) == 0, "%s", out);
    ck_assert_int_eq(sscanf(out, "%40s", key), 1);
}

/* Between hosts, over TCP: ddpd with CURVE takes only the keys its users file names (as
 * those users), a job of two "hosts" forms and runs; a stranger's key and a client without
 * CURVE are refused, each told why. Without CURVE ddpd will not listen beyond loopback. */
START_TEST(test_curve) {
    char tmp[64], server_key[128], user_key[128], stranger_key[128], users[128];
    snprintf(tmp, sizeof(tmp), "/tmp/ddp-curve-%d", (int)getpid());
    ck_assert_int_eq(mkdir(tmp, 0700), 0);
    snprintf(server_key, sizeof(server_key), "%s/server.key", tmp);
    snprintf(user_key, sizeof(user_key), "%s/user.key", tmp);
    snprintf(stranger_key, sizeof(stranger_key), "%s/stranger.key", tmp);
    snprintf(users, sizeof(users), "%s/users", tmp);
    char server_pub[41], user_pub[41], stranger_pub[41], out[4096];
    keygen(server_key, server_pub);
    keygen(user_key, user_pub);
    keygen(stranger_key, stranger_pub);
    FILE *f = fopen(users, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "# who may connect\n%s %s\n", getpwuid(getuid())->pw_name, user_pub);
    fclose(f);

    /* beyond loopback: not without CURVE, unless told */
    const char *open_argv[] = {DDPD_PATH, "--listen", "tcp://0.0.0.0:*", NULL};
    ck_assert_int_eq(run_tool(open_argv, NULL, out, sizeof(out)), 2);
    ck_assert_msg(strstr(out, "refusing to listen on tcp://0.0.0.0:* without CURVE"), "%s", out);
    const char *half[] = {DDPD_PATH, "--listen", "tcp://127.0.0.1:*", "--curve-key", server_key, NULL};
    ck_assert_int_eq(run_tool(half, NULL, out, sizeof(out)), 2);
    ck_assert_msg(strstr(out, "--curve-key and --curve-users go together"), "%s", out);

    ddpd_proc d;
    const char *argv[] = {DDPD_PATH, "--listen", "tcp://127.0.0.1:*", "--curve-key", server_key, "--curve-users",
                          users,     NULL};
    proc_start(&d.p, argv, NULL);
    char line[512];
    ck_assert_msg(proc_expect(&d.p, "listening on ", 10000, line, sizeof(line)), "%s", proc_output_tail(&d.p));
    ck_assert(sscanf(strstr(line, "listening on ") + 13, "%256s", d.endpoint) == 1);
    char coord[300], server_env[80], user_env[160], stranger_env[160];
    snprintf(coord, sizeof(coord), "DDP_COORDINATOR=%s", d.endpoint);
    snprintf(server_env, sizeof(server_env), "DDP_CURVE_SERVER_KEY=%s", server_pub);
    snprintf(user_env, sizeof(user_env), "DDP_CURVE_KEY=%s", user_key);
    snprintf(stranger_env, sizeof(stranger_env), "DDP_CURVE_KEY=%s", stranger_key);

    /* a job of two hosts over CURVE */
    proc ranks[2];
    for (int r = 0; r < 2; r++) {
        const char *env[] = {coord,
                             server_env,
                             user_env,
                             r ? "DDP_HOST=host-b" : "DDP_HOST=host-a",
                             "WORLD_SIZE=2",
                             r ? "RANK=1" : "RANK=0",
                             "DDP_JOB=hosts",
                             "DDP_DATA_ENDPOINT=tcp://127.0.0.1:*",
                             NULL};
        const char *member[] = {MEMBER_PATH, "--barriers", "2", "--all-reduce", "1", NULL};
        proc_start(&ranks[r], member, env);
    }
    for (int r = 0; r < 2; r++) {
        ck_assert_msg(proc_wait(&ranks[r], WAIT_MS) == 0, "rank %d: %s", r, proc_output_tail(&ranks[r]));
        ck_assert_msg(strstr(proc_output(&ranks[r]), "barrier 1 ok"), "%s", proc_output_tail(&ranks[r]));
        proc_close(&ranks[r]);
    }
    /* a key the users file does not name, and no CURVE at all: refused, and told so */
    const char *member[] = {MEMBER_PATH, NULL};
    const char *stranger[] = {coord, server_env, stranger_env, "WORLD_SIZE=1", "DDP_CONNECT_TIMEOUT_MS=3000", NULL};
    ck_assert_int_eq(run_tool(member, stranger, out, sizeof(out)), 2);
    ck_assert_msg(strstr(out, "refused this client's CURVE key (its --curve-users does not name it)"), "%s", out);
    const char *plain[] = {coord, "WORLD_SIZE=1", "DDP_CONNECT_TIMEOUT_MS=3000", NULL};
    ck_assert_int_eq(run_tool(member, plain, out, sizeof(out)), 2);
    ck_assert_msg(strstr(out, "one side speaks CURVE and the other not"), "%s", out);
    /* ddpctl likewise */
    const char *ctl[] = {DDPCTL_PATH, "--coordinator", d.endpoint, "--curve-server-key", server_pub, "--curve-key",
                         user_key,    "status",        NULL};
    ck_assert_msg(run_tool(ctl, NULL, out, sizeof(out)) == 0, "%s", out);
    ck_assert_msg(strstr(out, "job 'hosts'") == NULL, "the finished job is gone: %s", out);
    ck_assert_msg(strstr(proc_output(&d.p), "refused a CURVE client with key"), "%s", proc_output_tail(&d.p));
    /* and says why ddpd did not answer, with an exit code of its own (3) */
    const char *ctl_stranger[] = {DDPCTL_PATH, "--coordinator", d.endpoint,   "--curve-server-key",
                                  server_pub,  "--curve-key",   stranger_key, "--timeout-ms",
                                  "3000",      "status",        NULL};
    ck_assert_int_eq(run_tool(ctl_stranger, NULL, out, sizeof(out)), 3);
    ck_assert_msg(strstr(out, "refused this client's CURVE key (its --curve-users does not name its public key)"), "%s",
                  out);
    const char *ctl_no_key[] = {DDPCTL_PATH,          "--coordinator", d.endpoint,
                                "--curve-server-key", server_pub,      "--curve-key",
                                "/nonexistent.key",   "status",        NULL};
    ck_assert_int_eq(run_tool(ctl_no_key, NULL, out, sizeof(out)), 2); /* a bad flag, before any request */
    ck_assert_msg(strstr(out, "/nonexistent.key"), "%s", out);
    const char *ctl_plain[] = {DDPCTL_PATH, "--coordinator", d.endpoint, "--timeout-ms", "3000", "status", NULL};
    ck_assert_int_eq(run_tool(ctl_plain, NULL, out, sizeof(out)), 3);
    ck_assert_msg(strstr(out, "one side speaks CURVE and the other not"), "%s", out);
    ck_assert_int_eq(ddpd_stop(&d), 0);
    const char *files[] = {server_key, user_key, stranger_key, users};
    for (size_t i = 0; i < 4; i++)
        unlink(files[i]);
    rmdir(tmp);
}
END_TEST

/* Rank's data endpoint in job, and the job's generation, as ddpd shows them to its owner. */
static void data_endpoint_of(const ddpd_proc *d, const char *job, int rank, char *ep, size_t size,
                             uint64_t *generation) {
    void *ctx = zmq_ctx_new(), *s = raw_connect(ctx, d->endpoint);
    uint64_t deadline = clock_now_ms() + 10000;
    ep[0] = '\0';
    for (uint64_t seq = 1; !ep[0] && clock_now_ms() < deadline; seq++) {
        Ddp__StatusRequest body = DDP__STATUS_REQUEST__INIT;
        Ddp__Envelope env;
        wire_envelope_init(&env, DDP__MSG_TYPE__STATUS_REQUEST, "", -1, 0, seq);
        env.status_request = &body;
        wire_msg msg;
        ck_assert_int_eq(raw_request(s, &env, 5000, &msg), 0);
        for (size_t i = 0; i < msg.env->status_reply->n_jobs; i++) {
            const Ddp__JobStatus *j = msg.env->status_reply->jobs[i];
            for (size_t k = 0; strcmp(j->name, job) == 0 && k < j->n_members; k++)
                if (j->members[k]->rank == rank && j->generation) {
                    snprintf(ep, size, "%s", j->members[k]->endpoint);
                    *generation = j->generation;
                }
        }
        wire_msg_close(&msg);
    }
    zmq_close(s);
    zmq_ctx_term(ctx);
    ck_assert_msg(ep[0], "job '%s' has no rank %d after 10 s", job, rank);
}

/* From this process (not a rank of the job): the frame rank 1 expects from rank 0's
 * ddp_send of one int with tag 7, carrying 666 instead of 42. Before the data plane had a
 * guard, rank 1 took it. */
static void forge_send(const char *ep, uint64_t generation) {
    void *ctx = zmq_ctx_new(), *push = zmq_socket(ctx, ZMQ_PUSH);
    int linger = 0, forged = 666;
    zmq_setsockopt(push, ZMQ_LINGER, &linger, sizeof(linger));
    ck_assert_int_eq(zmq_connect(push, ep), 0);
    comm_header h = {.magic = COMM_MAGIC,
                     .version = COMM_VERSION,
                     .kind = COLL_SEND,
                     .dtype = DTYPE_I32,
                     .op = REDUCE_SUM,
                     .src = 0,
                     .tag = 7,
                     .root = 1,
                     .generation = generation,
                     .count = 1,
                     .n = 1};
    ck_assert_int_eq(zmq_send(push, &h, sizeof(h), ZMQ_SNDMORE), sizeof(h));
    ck_assert_int_eq(zmq_send(push, &forged, sizeof(forged), 0), sizeof(forged));
    usleep(1000 * 1000); /* its handshakes (refused, and tried again), on a busy machine too */
    zmq_close(push);
    zmq_ctx_term(ctx);
}

/* A process that is no rank connects to a ps job's push-segment socket (its name is in
 * /proc/net/unix for all to see) with a message carrying a TCP socket whose close lingers
 * (SO_LINGER 60 s, its send queue full towards a peer that never reads), sent while ddpd is
 * stopped so that it is in before ddpd takes the connection. ddpd refuses the connection
 * unread; the release of that socket, when the connection closes, waits: on a
 * closing thread, not on ddpd's loop, which says so at once and answers a status request
 * (the loop waited the 60 s before). Any user. */
START_TEST(test_ps_connection_with_a_lingering_socket) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    snprintf(endpoint, sizeof(endpoint), "%.127s", d.endpoint); /* tcp://127.0.0.1:PORT */
    void *ctx = zmq_ctx_new();
    void *members[2];
    char socket_name[FD_SOCKET_NAME_BYTES] = "";
    ps_job_of_this_process(ctx, "ps-linger", members, socket_name);
    int done[2], sent[2];
    ck_assert_int_eq(pipe(done), 0);
    ck_assert_int_eq(pipe(sent), 0);
    proc_signal(&d.p, SIGSTOP); /* the message is in before ddpd takes the connection (else a refusal first) */
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) { /* no rank: its pid is no member's */
        close(done[1]);
        close(sent[0]);
        int listener = socket(AF_INET, SOCK_STREAM, 0), tcp = socket(AF_INET, SOCK_STREAM, 0), sock = -1;
        struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof(addr);
        if (bind(listener, (struct sockaddr *)&addr, sizeof(addr)) < 0 || listen(listener, 1) < 0 ||
            getsockname(listener, (struct sockaddr *)&addr, &len) < 0 ||
            connect(tcp, (struct sockaddr *)&addr, len) < 0 || fcntl(tcp, F_SETFL, O_NONBLOCK) < 0)
            _exit(2);
        static char junk[1 << 16];
        while (send(tcp, junk, sizeof(junk), MSG_NOSIGNAL) > 0) /* until both queues are full */
            ;
        struct linger linger = {.l_onoff = 1, .l_linger = 60};
        if (setsockopt(tcp, SOL_SOCKET, SO_LINGER, &linger, sizeof(linger)) < 0 ||
            fd_socket_connect(socket_name, &sock) < 0 || fd_socket_send(sock, tcp, 0) < 0)
            _exit(3);
        close(tcp); /* the copy in the message is the last */
        char c = 1;
        if (write(sent[1], &c, 1) != 1)
            _exit(4);
        _exit(read(done[0], &c, 1) < 0 ? 5 : 0); /* the peer that never reads stays until then */
    }
    close(done[0]);
    close(sent[1]);
    struct pollfd in = {.fd = sent[0], .events = POLLIN};
    ck_assert_int_eq(poll(&in, 1, 15000), 1);
    proc_signal(&d.p, SIGCONT);
    close(sent[0]);
    ck_assert_msg(proc_expect(&d.p, "is no rank of this job: refused before it said a word", 15000, NULL, 0), "%s",
                  proc_output_tail(&d.p));
    Ddp__StatusRequest body = DDP__STATUS_REQUEST__INIT;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__STATUS_REQUEST, "", -1, 0, 78);
    env.status_request = &body;
    void *ask = raw_connect(ctx, d.endpoint);
    wire_msg msg = {0};
    ck_assert_int_eq(raw_request(ask, &env, 15000, &msg), 0);
    ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__STATUS_REPLY);
    wire_msg_close(&msg);
    close(done[1]); /* the peer goes: the linger ends */
    int status = 0;
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the stranger: status %d", status);
    zmq_close(ask);
    for (int r = 0; r < 2; r++)
        zmq_close(members[r]);
    zmq_ctx_term(ctx);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

/* Rank 1 waits 1.5 s for rank 0's send while this process, the same user as the job but
 * none of its ranks, sends rank 1 a frame of its own, and as root another user too: refused
 * at the handshake (over ipc:// by the kernel's pid and user; over tcp:// for want of a
 * CURVE key), counted, and rank 1 receives rank 0's value. */
START_TEST(test_data_plane) {
    static const struct {
        const char *endpoint, *refusal;
    } planes[] = {
        {"ipc://@*", "which is not a rank of the job on this host"},
        {"tcp://127.0.0.1:*", "a handshake that failed before authentication"},
    };
    ddpd_proc d;
    ddpd_start(&d, NULL);
    for (size_t i = 0; i < sizeof(planes) / sizeof(planes[0]); i++) {
        char job[32], data_env[64], ep[DDP_MAX_ENDPOINT + 1], line[512];
        snprintf(job, sizeof(job), "forged-%zu", i);
        snprintf(data_env, sizeof(data_env), "DDP_DATA_ENDPOINT=%s", planes[i].endpoint);
        proc ranks[2];
        for (int r = 0; r < 2; r++) {
            const char *argv[] = {"/usr/bin/env",
                                  data_env,
                                  "DDP_TRANSPORT=zmq",
                                  MEMBER_PATH,
                                  "--recv-late-ms", /* after the forgers' tries */
                                  "4000",
                                  "--barriers",
                                  "0",
                                  NULL};
            rank_start(&ranks[r], &d, 2, r, job, argv);
        }
        uint64_t generation = 0;
        data_endpoint_of(&d, job, 1, ep, sizeof(ep), &generation);
        forge_send(ep, generation);
        if (geteuid() == 0) { /* and another user: as root, a child that becomes nobody */
            pid_t child = fork();
            ck_assert_int_ge(child, 0);
            if (child == 0) {
                if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
                    _exit(3);
                forge_send(ep, generation);
                _exit(0);
            }
            int status = 0;
            ck_assert_int_eq(waitpid(child, &status, 0), child);
            ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the other user's forger: status %d", status);
        }
        ck_assert_msg(proc_wait(&ranks[1], WAIT_MS) == 0, "%s", proc_output_tail(&ranks[1]));
        ck_assert_msg(strstr(proc_output(&ranks[1]), "received 42 from rank 0"), "%s", proc_output_tail(&ranks[1]));
        ck_assert_msg(proc_expect(&ranks[1], "refused ", 0, line, sizeof(line)), "%s", proc_output_tail(&ranks[1]));
        unsigned long long connections = 0;
        ck_assert_msg(sscanf(line, "refused %llu connections", &connections) == 1 &&
                          connections >= (geteuid() == 0 ? 2u : 1u) && strstr(line, planes[i].refusal),
                      "%s: %s", planes[i].endpoint, line);
        ck_assert_msg(proc_wait(&ranks[0], WAIT_MS) == 0, "%s", proc_output_tail(&ranks[0]));
        for (int r = 0; r < 2; r++)
            proc_close(&ranks[r]);
    }
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

/* The user directory does not answer (every user and group lookup of ddpd's takes 8 s,
 * as NSS over an LDAP server that is down): ddpd's loop goes on. A status answers at once,
 * naming the owner of root's job by uid until the name comes; nobody's abort of root's job
 * is asked to try again (whether nobody is an operator is not known yet); the job forms and
 * runs; then the name comes. */
START_TEST(test_slow_user_directory) {
    snprintf(dir, sizeof(dir), "/tmp/ddp-security-%d", (int)getpid());
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    snprintf(endpoint, sizeof(endpoint), "ipc://%s/ddpd.sock", dir);
    const char *asan = getenv("ASAN_OPTIONS");
    char asan_env[512]; /* the preloaded library comes before the sanitizer's runtime */
    snprintf(asan_env, sizeof(asan_env), "ASAN_OPTIONS=%s%sverify_asan_link_order=0", asan ? asan : "",
             asan && asan[0] ? ":" : "");
    const char *env[] = {"LD_PRELOAD=" SLOW_CALLS_PATH, "DDP_TEST_NSS_DELAY_MS=8000", asan_env, NULL};
    const char *argv[] = {DDPD_PATH, "--listen", endpoint, "--operator-group", "adm", NULL};
    ddpd_proc d;
    snprintf(d.endpoint, sizeof(d.endpoint), "%s", endpoint);
    proc_start(&d.p, argv, env);
    ck_assert_msg(proc_expect(&d.p, "listening on ", 10000, NULL, 0), "%s", proc_output_tail(&d.p));

    proc root0, root1, ctl;
    const char *barriers[] = {"--barriers", "3", NULL};
    member_start(&root0, &d, 2, 0, "lab", barriers);
    ck_assert(proc_expect(&d.p, "joined (1/2)", WAIT_MS, NULL, 0));
    const char *status[] = {DDPCTL_PATH, "--coordinator", endpoint, "--timeout-ms", "3000", "status", NULL};
    proc_start(&ctl, status, NULL);
    ck_assert_msg(proc_wait(&ctl, WAIT_MS) == 0, "%s", proc_output_tail(&ctl));
    ck_assert_msg(strstr(proc_output(&ctl), "job 'lab' of user uid 0: forming, 1/2 members"), "%s",
                  proc_output_tail(&ctl));
    proc_close(&ctl);
    const char *abort_as_other[] = {"/usr/bin/setpriv",
                                    "--reuid=" OTHER_UID,
                                    "--regid=" OTHER_UID,
                                    "--clear-groups",
                                    DDPCTL_PATH,
                                    "--coordinator",
                                    endpoint,
                                    "--timeout-ms",
                                    "3000",
                                    "abort",
                                    "lab",
                                    NULL};
    proc_start(&ctl, abort_as_other, NULL);
    ck_assert_int_ne(proc_wait(&ctl, WAIT_MS), 0);
    ck_assert_msg(strstr(proc_output(&ctl), "the user directory has not answered yet whether you are an operator: "
                                            "try again"),
                  "%s", proc_output_tail(&ctl));
    proc_close(&ctl);

    member_start(&root1, &d, 2, 1, "lab", barriers);
    ck_assert_msg(proc_wait(&root0, WAIT_MS) == 0, "%s", proc_output_tail(&root0));
    ck_assert_msg(proc_wait(&root1, WAIT_MS) == 0, "%s", proc_output_tail(&root1));
    ck_assert_msg(strstr(proc_output(&root0), "barrier 2 ok"), "%s", proc_output_tail(&root0));
    proc_close(&root0);
    proc_close(&root1);

    member_start(&root0, &d, 2, 0, "named", barriers); /* a job to name, once the name has come */
    ck_assert(proc_expect(&d.p, "joined (1/2)", WAIT_MS, NULL, 0));
    bool named = false;
    for (uint64_t until = clock_now_ms() + WAIT_MS; !named && clock_now_ms() < until; usleep(200 * 1000)) {
        proc_start(&ctl, status, NULL);
        ck_assert_msg(proc_wait(&ctl, WAIT_MS) == 0, "%s", proc_output_tail(&ctl));
        named = strstr(proc_output(&ctl), "job 'named' of user root: forming") != NULL;
        proc_close(&ctl);
    }
    ck_assert_msg(named, "root never named in ddpctl status");
    proc_signal(&root0, SIGKILL);
    proc_close(&root0);
    stop_ddpd(&d);
}
END_TEST

int main(int argc, char **argv) {
    if (check_selected(argc, argv, "other-user") && geteuid() != 0)
        return check_skip("other-user", "acting as another user needs root (setpriv)");
    Suite *s = suite_create("security");
    TCase *tc = tcase_create("other-user");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_other_user);
    tcase_add_test(tc, test_quotas);
    tcase_add_test(tc, test_abort_names_the_owner);
    tcase_add_test(tc, test_ps_segment_of_another_user);
    tcase_add_test(tc, test_routing_id_of_another_user);
    tcase_add_test(tc, test_slow_user_directory);
    if (geteuid() == 0)
        suite_add_tcase(s, tc);
    const char *ck_fork = getenv("CK_FORK");
    bool forks = !ck_fork || strcmp(ck_fork, "no") != 0; /* its mount namespace must be a test process's own */
    if (check_selected(argc, argv, "stalled-mount") && !(forks && fuse_usable()))
        return check_skip("stalled-mount", forks ? "serving a FUSE mount needs root, /dev/fuse and python3-fusepy"
                                                 : "it unshares its mount namespace: it needs CK_FORK");
    TCase *fuse = tcase_create("stalled-mount");
    tcase_set_timeout(fuse, 120);
    tcase_add_test(fuse, test_ps_segment_on_a_stalled_mount);
    if (forks && fuse_usable())
        suite_add_tcase(s, fuse);
    TCase *curve = tcase_create("curve");
    tcase_set_timeout(curve, 120);
    tcase_add_test(curve, test_curve);
    suite_add_tcase(s, curve);
    TCase *data = tcase_create("data-plane");
    tcase_set_timeout(data, 120);
    tcase_add_test(data, test_data_plane);
    tcase_add_test(data, test_ps_connection_with_a_lingering_socket);
    suite_add_tcase(s, data);
    return check_main(s, argc, argv);
}
