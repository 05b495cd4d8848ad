/* ddpd and real members on loopback: forming jobs, rejects, deaths, hostile peers. */
#include <arpa/inet.h>
#include <cJSON.h>
#include <check.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/data_plane.h"
#include "common/fd_socket.h"
#include "common/ps_segment.h"
#include "common/shm_segment.h"
#include "tests/check_main.h"
#include "tests/integration/harness.h"

#define WAIT_MS 20000 /* generous: a failure is a missing line, never a slow one */

/* Starts n members of job, waits for each to print its rank, and checks the ranks are
 * exactly 0..n-1. */
static void form_and_check(const ddpd_proc *d, int n, const char *job, const char *const *args, proc *members) {
    bool seen[64] = {false};
    for (int i = 0; i < n; i++)
        member_start(&members[i], d, n, -1, job, args);
    for (int i = 0; i < n; i++) {
        char line[256];
        int rank = -1, world = -1;
        ck_assert_msg(proc_expect(&members[i], "joined rank", WAIT_MS, line, sizeof(line)), "member %d: %s", i,
                      proc_output_tail(&members[i]));
        ck_assert_int_eq(sscanf(line, "joined rank %d world %d", &rank, &world), 2);
        ck_assert_int_eq(world, n);
        ck_assert_msg(rank >= 0 && rank < n && !seen[rank], "rank %d given twice or out of range", rank);
        seen[rank] = true;
    }
}

/* Each of n members exits 0; then they are closed. */
static void all_exit_ok(proc *members, int n) {
    for (int i = 0; i < n; i++) {
        ck_assert_msg(proc_wait(&members[i], WAIT_MS) == 0, "member %d: %s", i, proc_output_tail(&members[i]));
        proc_close(&members[i]);
    }
}

static void world_of(int n) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    proc members[8];
    const char *args[] = {"--barriers", "3", NULL};
    form_and_check(&d, n, "world", args, members);
    for (int i = 0; i < n; i++)
        ck_assert_msg(proc_expect(&members[i], "barrier 2 ok", WAIT_MS, NULL, 0), "%s", proc_output_tail(&members[i]));
    all_exit_ok(members, n);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}

START_TEST(test_world_sizes) {
    static const int sizes[] = {1, 2, 4, 8};
    world_of(sizes[_i]);
}
END_TEST

START_TEST(test_duplicate_rank_rejected) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    proc first, dup, second;
    const char *args[] = {"--barriers", "1", NULL};
    member_start(&first, &d, 2, 0, "dup", args);
    ck_assert(proc_expect(&d.p, "joined (1/2)", WAIT_MS, NULL, 0));
    member_start(&dup, &d, 2, 0, "dup", args);
    char line[512];
    ck_assert_msg(proc_expect(&dup, "init failed", WAIT_MS, line, sizeof(line)), "%s", proc_output_tail(&dup));
    ck_assert_msg(strstr(line, "rank 0 of job 'dup' is already taken by pid"), "%s", line);
    ck_assert_int_eq(proc_wait(&dup, WAIT_MS), 2);
    /* A different world size is refused too, and the forming job is not disturbed. */
    proc other;
    member_start(&other, &d, 3, -1, "dup", args);
    ck_assert(proc_expect(&other, "world size 3 differs from job 'dup''s world size 2", WAIT_MS, NULL, 0));
    ck_assert_int_eq(proc_wait(&other, WAIT_MS), 2);
    member_start(&second, &d, 2, 1, "dup", args);
    ck_assert_msg(proc_expect(&first, "joined rank 0 world 2", WAIT_MS, NULL, 0), "%s", proc_output_tail(&first));
    ck_assert(proc_expect(&second, "joined rank 1 world 2", WAIT_MS, NULL, 0));
    ck_assert_int_eq(proc_wait(&first, WAIT_MS), 0);
    ck_assert_int_eq(proc_wait(&second, WAIT_MS), 0);
    proc_close(&first);
    proc_close(&second);
    proc_close(&dup);
    proc_close(&other);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

START_TEST(test_version_mismatch_rejected) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    proc waiting;
    member_start(&waiting, &d, 2, -1, "ver", NULL);
    ck_assert(proc_expect(&d.p, "joined (1/2)", WAIT_MS, NULL, 0));

    void *ctx = zmq_ctx_new();
    void *raw = raw_connect(ctx, d.endpoint);
    Ddp__Join join = DDP__JOIN__INIT;
    join.data_plane = DDP_DATA_PLANE_VERSION; /* as this build's libddp */
    join.world_size = 2;
    join.rank = -1;
    join.pid = 1;
    join.host = (char *)"test";
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__JOIN, "ver", -1, 0, 7);
    env.version = DDP_PROTOCOL_VERSION + 1;
    env.join = &join;
    wire_msg msg;
    ck_assert_int_eq(raw_request(raw, &env, WAIT_MS, &msg), 0);
    ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__REJECT);
    ck_assert_uint_eq(msg.env->seq, 7);
    ck_assert_int_eq(msg.env->reject->code, -EPROTONOSUPPORT);
    ck_assert_msg(strstr(msg.env->reject->reason, "protocol version 2"), "%s", msg.env->reject->reason);
    wire_msg_close(&msg);
    /* the protocol's version, but another libddp's data plane (the ranks would read each
     * other's memory by other layouts): refused, naming both; and in ps mode, ddpd's own */
    for (int ps = 0; ps < 2; ps++) {
        uint64_t buckets[1] = {1000};
        join.data_plane = DDP_DATA_PLANE_VERSION + 1;
        join.mode = (char *)(ps ? "ps" : "");
        join.ps_buckets = ps ? buckets : NULL;
        join.n_ps_buckets = ps ? 1 : 0;
        wire_envelope_init(&env, DDP__MSG_TYPE__JOIN, ps ? "ver-ps" : "ver", -1, 0, 8);
        env.join = &join;
        ck_assert_int_eq(raw_request(raw, &env, WAIT_MS, &msg), 0);
        ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__REJECT);
        ck_assert_msg(msg.env->reject->code == -EPROTONOSUPPORT, "%d: %s", msg.env->reject->code,
                      msg.env->reject->reason);
        char expected[128];
        snprintf(expected, sizeof(expected), "data plane version %d is not %s %d", DDP_DATA_PLANE_VERSION + 1,
                 ps ? "this ddpd's" : "job 'ver''s", DDP_DATA_PLANE_VERSION);
        ck_assert_msg(strstr(msg.env->reject->reason, expected), "%s", msg.env->reject->reason);
        wire_msg_close(&msg);
    }
    zmq_close(raw);
    /* a Join without the field, from a release before it was sent, speaks version 1: it
     * forms a job with this release's libddp */
    void *pair[2];
    for (int k = 0; k < 2; k++) {
        pair[k] = raw_connect(ctx, d.endpoint);
        join.data_plane = k ? DDP_DATA_PLANE_VERSION : 0;
        join.mode = (char *)"";
        join.ps_buckets = NULL;
        join.n_ps_buckets = 0;
        wire_envelope_init(&env, DDP__MSG_TYPE__JOIN, "older", -1, 0, 9);
        env.join = &join;
        ck_assert_int_eq(wire_send(pair[k], NULL, 0, &env, NULL, 0), 0);
    }
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(raw_next(pair[k], WAIT_MS, &msg), 0);
        ck_assert_msg(msg.env->type == DDP__MSG_TYPE__WELCOME, "%s: %s", wire_type_name(msg.env->type),
                      msg.env->type == DDP__MSG_TYPE__REJECT ? msg.env->reject->reason : "");
        wire_msg_close(&msg);
        zmq_close(pair[k]);
    }
    zmq_ctx_term(ctx);

    proc second;
    member_start(&second, &d, 2, -1, "ver", NULL);
    ck_assert(proc_expect(&waiting, "barrier 0 ok", WAIT_MS, NULL, 0));
    ck_assert(proc_expect(&second, "barrier 0 ok", WAIT_MS, NULL, 0));
    ck_assert_int_eq(proc_wait(&waiting, WAIT_MS), 0);
    ck_assert_int_eq(proc_wait(&second, WAIT_MS), 0);
    proc_close(&waiting);
    proc_close(&second);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

START_TEST(test_killed_member_named_within_3s) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    proc members[4];
    for (int r = 0; r < 4; r++) {
        const char *args[] = {"--barriers", "100", "--hang-at", r == 2 ? "1" : "1000", NULL};
        member_start(&members[r], &d, 4, r, "kill", args);
    }
    for (int r = 0; r < 4; r++)
        ck_assert_msg(proc_expect(&members[r], "barrier 0 ok", WAIT_MS, NULL, 0), "%s", proc_output_tail(&members[r]));

    uint64_t killed_at = clock_now_ms();
    proc_signal(&members[2], SIGKILL);
    char expected[64];
    snprintf(expected, sizeof(expected), "rank 2 (pid %d on ", (int)members[2].pid);
    for (int r = 0; r < 4; r++) {
        if (r == 2)
            continue;
        char line[512];
        ck_assert_msg(proc_expect(&members[r], "failed", WAIT_MS, line, sizeof(line)), "%s",
                      proc_output_tail(&members[r]));
        uint64_t elapsed = clock_now_ms() - killed_at;
        ck_assert_msg(strstr(line, expected) && strstr(line, "died"), "rank %d: %s", r, line);
        ck_assert_msg(elapsed < 3000, "rank %d learnt of the death after %llu ms", r, (unsigned long long)elapsed);
    }
    for (int r = 0; r < 4; r++) /* after every rank's word: an exit (a sanitizer's) is no part of the 3 s */
        if (r != 2)
            ck_assert_int_eq(proc_wait(&members[r], WAIT_MS), 3);
    for (int r = 0; r < 4; r++)
        proc_close(&members[r]);

    /* The job ended: one of the same name forms at once. */
    proc again[2];
    form_and_check(&d, 2, "kill", NULL, again);
    all_exit_ok(again, 2);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

/* A rank of a job that ended gives up late (ddp_abort), while a relaunch of the same name
 * forms: the relaunch is not its to end, and forms once its rank 0 comes. */
START_TEST(test_late_abort_spares_relaunch) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    char flag[64];
    snprintf(flag, sizeof(flag), "/tmp/ddp-late-abort-%d", (int)getpid());
    unlink(flag);
    proc old[2], relaunch[2];
    const char *late[] = {"--abort-after-end", flag, NULL}, *hang[] = {"--hang-at", "0", NULL};
    member_start(&old[0], &d, 2, 0, "relaunch", late);
    member_start(&old[1], &d, 2, 1, "relaunch", hang);
    ck_assert_msg(proc_expect(&old[0], "joined", WAIT_MS, NULL, 0), "%s", proc_output_tail(&old[0]));
    proc_signal(&old[1], SIGKILL);
    ck_assert_msg(proc_expect(&old[0], "job ended", WAIT_MS, NULL, 0), "%s", proc_output_tail(&old[0]));
    const char *barriers[] = {"--barriers", "2", NULL};
    member_start(&relaunch[1], &d, 2, 1, "relaunch", barriers);
    void *ctx = zmq_ctx_new();
    raw_wait_members(ctx, d.endpoint, "relaunch", 1, WAIT_MS); /* the relaunch is forming */
    zmq_ctx_term(ctx);
    FILE *f = fopen(flag, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    ck_assert_msg(proc_expect(&old[0], "late abort: 0", WAIT_MS, NULL, 0), "%s", proc_output_tail(&old[0]));
    ck_assert_int_eq(proc_wait(&old[0], WAIT_MS), 0);
    member_start(&relaunch[0], &d, 2, 0, "relaunch", barriers);
    for (int r = 0; r < 2; r++) {
        ck_assert_msg(proc_expect(&relaunch[r], "barrier 1 ok", WAIT_MS, NULL, 0), "rank %d: %s", r,
                      proc_output_tail(&relaunch[r]));
        ck_assert_int_eq(proc_wait(&relaunch[r], WAIT_MS), 0);
    }
    for (int r = 0; r < 2; r++) {
        proc_close(&old[r]);
        proc_close(&relaunch[r]);
    }
    unlink(flag);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

/* A job one of whose ranks has left (finished early) when ddpd restarts: the others rejoin
 * saying so, and the new ddpd holds that rank as left rather than waiting for it and
 * ending the job ("ranks {2} did not come back"); they go on through it (the store). */
START_TEST(test_restart_after_a_rank_left) {
    char dir[64], listen[128], go[96];
    snprintf(dir, sizeof(dir), "/tmp/ddp-left-%d", (int)getpid());
    snprintf(listen, sizeof(listen), "ipc://%s/ddpd.sock", dir);
    snprintf(go, sizeof(go), "%s/go", dir);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    const char *flags[] = {"--listen", listen, NULL};
    ddpd_proc d;
    ddpd_start(&d, flags);
    const char *args[] = {"--leave-early", go, NULL};
    proc m[3];
    for (int r = 0; r < 3; r++)
        member_start(&m[r], &d, 3, r, "left", args);
    ck_assert_msg(proc_expect(&m[2], "leaving", WAIT_MS, NULL, 0), "%s", proc_output_tail(&m[2]));
    ck_assert_int_eq(proc_wait(&m[2], WAIT_MS), 0);
    ck_assert_msg(proc_expect(&d.p, "job 'left': rank 2 (pid", WAIT_MS, NULL, 0), "%s", proc_output_tail(&d.p));
    /* the others have heard so (a heartbeat names the ranks that left) before ddpd goes */
    usleep(1500 * 1000);
    ck_assert_int_eq(ddpd_stop(&d), 0);
    ddpd_start(&d, flags);
    for (int r = 0; r < 2; r++)
        ck_assert_msg(proc_expect(&m[r], "rejoined ddpd at", WAIT_MS, NULL, 0), "%s", proc_output_tail(&m[r]));
    FILE *f = fopen(go, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    for (int r = 0; r < 2; r++) {
        ck_assert_msg(proc_expect(&m[r], "store after: 'restart'", WAIT_MS, NULL, 0), "rank %d: %s", r,
                      proc_output_tail(&m[r]));
        ck_assert_int_eq(proc_wait(&m[r], WAIT_MS), 0);
    }
    for (int r = 0; r < 3; r++)
        proc_close(&m[r]);
    ck_assert_msg(proc_expect(&d.p, "recovered: every rank is back", WAIT_MS, NULL, 0), "%s", proc_output_tail(&d.p));
    ck_assert_int_eq(ddpd_stop(&d), 0);
    unlink(go);
    rmdir(dir);
}
END_TEST

/* An IPv4 address of this host beyond loopback, if it has one. */
static bool address_beyond_loopback(char *ip, size_t size) {
    struct ifaddrs *all;
    bool found = false;
    if (getifaddrs(&all) < 0)
        return false;
    for (struct ifaddrs *i = all; i && !found; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && !(i->ifa_flags & IFF_LOOPBACK) &&
            (i->ifa_flags & IFF_UP))
            found = inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, ip, (socklen_t)size) != NULL;
    freeifaddrs(all);
    return found;
}

/* A ddpd at an address beyond loopback (so its members judge it by its silence alone, as
 * one on another host) that stalls past their liveness window while rank 0's push of step
 * 0 waits in it: the ranks rejoin and find the same ddpd; rank 0 sends nothing again (its
 * push sent twice ended the job: "pushed step 0 twice"), rank 1 sends the push it made
 * while ddpd was away (held then), and the step completes. */
START_TEST(test_stalled_remote_ddpd) {
    char ip[INET_ADDRSTRLEN], listen[64], late[64];
    if (!address_beyond_loopback(ip, sizeof(ip))) {
        printf("test_stalled_remote_ddpd: this host has no address beyond loopback: not run\n");
        return;
    }
    snprintf(listen, sizeof(listen), "tcp://%s:*", ip);
    snprintf(late, sizeof(late), "/tmp/ddp-ps-late-%d", (int)getpid());
    unlink(late);
    const char *flags[] = {"--listen", listen, "--insecure", "--heartbeat-ms", "100", "--liveness", "10", NULL};
    ddpd_proc d;
    ddpd_start(&d, flags);
    const char *args[] = {"--ps", "2", "--ps-late", late, NULL};
    proc ranks[2];
    for (int r = 0; r < 2; r++)
        member_start(&ranks[r], &d, 2, r, "stall", args);
    /* a ddpd beyond loopback counts as on another host: no memory is shared with it (its
     * socket's abstract name there would be anyone's to take) */
    ck_assert_msg(proc_expect(&ranks[0], "ps in shared memory: no", WAIT_MS, NULL, 0), "%s",
                  proc_output_tail(&ranks[0]));
    ck_assert_msg(proc_expect(&ranks[0], "ps pushed 0", WAIT_MS, NULL, 0), "%s", proc_output_tail(&ranks[0]));
    proc_signal(&d.p, SIGSTOP);
    /* past the members' window (3 x 100 ms): rank 1 pushes while it rejoins, a push that
     * waits for ddpd's answer and must then go to it, the same ddpd all the same */
    ck_assert_msg(proc_expect(&ranks[1], "lost the coordinator", WAIT_MS, NULL, 0), "%s", proc_output_tail(&ranks[1]));
    /* and rank 0, waiting for its average (its control thread, starved on a busy machine,
     * might not judge the silence before ddpd continued) */
    ck_assert_msg(proc_expect(&ranks[0], "lost the coordinator", WAIT_MS, NULL, 0), "%s", proc_output_tail(&ranks[0]));
    FILE *f = fopen(late, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    ck_assert_msg(proc_expect(&ranks[1], "ps pushed 0", WAIT_MS, NULL, 0), "%s", proc_output_tail(&ranks[1]));
    proc_signal(&d.p, SIGCONT);
    for (int r = 0; r < 2; r++)
        ck_assert_msg(proc_expect(&ranks[r], "rejoined ddpd", WAIT_MS, NULL, 0), "%s", proc_output_tail(&ranks[r]));
    for (int r = 0; r < 2; r++) {
        ck_assert_msg(proc_expect(&ranks[r], "ps pulled 1", WAIT_MS, NULL, 0), "rank %d: %s", r,
                      proc_output_tail(&ranks[r]));
        ck_assert_int_eq(proc_wait(&ranks[r], WAIT_MS), 0);
        proc_close(&ranks[r]);
    }
    unlink(late);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

/* ddpd's peak resident memory, in MiB. */
static double peak_rss_mib(pid_t pid) {
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    double kib = -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmHWM: %lf kB", &kib) == 1)
            break;
    fclose(f);
    ck_assert(kib >= 0);
    return kib / 1024;
}

/* A member that asks for a 1 MiB store value 200 times and reads none of the answers (its
 * ZeroMQ takes one message in): ddpd holds at most its reply budget of them (64 MiB, not
 * 200), ends the job naming the rank, and goes on. */
START_TEST(test_unread_replies) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int one = 1, small_buffer = 4096;
    ck_assert_int_eq(wire_socket_setup(s, DDP_MAX_CONTROL_MSG_BYTES), 0);
    ck_assert_int_eq(zmq_setsockopt(s, ZMQ_RCVHWM, &one, sizeof(one)), 0);
    ck_assert_int_eq(zmq_setsockopt(s, ZMQ_RCVBUF, &small_buffer, sizeof(small_buffer)), 0);
    ck_assert_int_eq(zmq_connect(s, d.endpoint), 0);

    Ddp__Join join = DDP__JOIN__INIT;
    join.data_plane = DDP_DATA_PLANE_VERSION; /* as this build's libddp */
    join.world_size = 1;
    join.rank = 0;
    join.pid = (uint32_t)getpid();
    join.host = (char *)"test";
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__JOIN, "greedy", -1, 0, 1);
    env.join = &join;
    wire_msg msg;
    ck_assert_int_eq(raw_request(s, &env, WAIT_MS, &msg), 0);
    ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__WELCOME);
    uint64_t generation = msg.env->generation;
    wire_msg_close(&msg);

    static uint8_t value[1 << 20];
    Ddp__StoreSet set = DDP__STORE_SET__INIT;
    set.key = (char *)"big";
    set.value = (ProtobufCBinaryData){sizeof(value), value};
    wire_envelope_init(&env, DDP__MSG_TYPE__STORE_SET, "greedy", 0, generation, 2);
    env.store_set = &set;
    ck_assert_int_eq(raw_request(s, &env, WAIT_MS, &msg), 0);
    ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__STORE_VALUE);
    wire_msg_close(&msg);
    double before = peak_rss_mib(d.p.pid);

    Ddp__StoreGet get = DDP__STORE_GET__INIT;
    get.key = (char *)"big";
    for (uint64_t i = 0; i < 200; i++) {
        wire_envelope_init(&env, DDP__MSG_TYPE__STORE_GET, "greedy", 0, generation, 3 + i);
        env.store_get = &get;
        ck_assert_int_eq(wire_send(s, NULL, 0, &env, NULL, 0), 0);
    }
    ck_assert_msg(proc_expect(&d.p, "does not read ddpd's replies", WAIT_MS, NULL, 0), "%s", proc_output_tail(&d.p));
    double grown = peak_rss_mib(d.p.pid) - before;
    ck_assert_msg(grown < 64 + 32, "ddpd grew by %.0f MiB for replies nobody read", grown);
    zmq_close(s);
    zmq_ctx_term(ctx);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

/* Sends every kind of nonsense, then checks ddpd still forms a job. */
START_TEST(test_garbage_flood) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    void *ctx = zmq_ctx_new();
    void *raw = raw_connect(ctx, d.endpoint);
    unsigned seed = 12345;
    uint8_t junk[4096];
    for (int i = 0; i < 3000; i++) {
        int frames = 1 + rand_r(&seed) % 12;
        for (int f = 0; f < frames; f++) {
            size_t n = (size_t)(rand_r(&seed) % (int)sizeof(junk));
            for (size_t k = 0; k < n; k++)
                junk[k] = (uint8_t)rand_r(&seed);
            zmq_send(raw, junk, n, f + 1 < frames ? ZMQ_SNDMORE : 0);
        }
    }
    /* Empty frames, and valid envelopes of every type in the wrong direction or state. */
    zmq_send(raw, "", 0, 0);
    for (int type = 0; type <= 20; type++) {
        Ddp__Envelope env;
        wire_envelope_init(&env, (Ddp__MsgType)type, "flood", 3, 9, (uint64_t)type);
        uint8_t buf[256];
        size_t n = ddp__envelope__pack(&env, buf);
        zmq_send(raw, buf, n, 0);
        zmq_send(raw, buf, n / 2, 0); /* truncated */
    }
    /* A frame beyond ZMQ_MAXMSGSIZE: ZeroMQ drops the connection, ddpd carries on. */
    size_t huge = (size_t)DDP_MAX_CONTROL_MSG_BYTES + 1;
    char *big = calloc(1, huge);
    zmq_send(raw, big, huge, 0);
    free(big);
    /* And bytes that are not even ZeroMQ. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(d.port))};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    signal(SIGPIPE, SIG_IGN); /* ZeroMQ hangs up on such a peer, as it should */
    for (int i = 0; i < 64; i++)
        if (write(fd, junk, 1024) < 0)
            break;
    close(fd);

    proc members[2];
    form_and_check(&d, 2, "after-flood", NULL, members);
    all_exit_ok(members, 2);
    ck_assert(proc_expect(&d.p, "dropped a bad message", WAIT_MS, NULL, 0));
    zmq_close(raw);
    zmq_ctx_term(ctx);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

START_TEST(test_status_table_and_json) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    proc waiting;
    member_start(&waiting, &d, 2, 1, "stat", NULL);
    ck_assert(proc_expect(&d.p, "joined (1/2)", WAIT_MS, NULL, 0));

    const char *argv_json[] = {DDPCTL_PATH, "--coordinator", d.endpoint, "status", "--json", NULL};
    proc ctl;
    proc_start(&ctl, argv_json, NULL);
    ck_assert_int_eq(proc_wait(&ctl, WAIT_MS), 0);
    cJSON *root = cJSON_Parse(proc_output(&ctl));
    ck_assert_msg(root, "not JSON: %s", proc_output_tail(&ctl));
    cJSON *job = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "jobs"), 0);
    ck_assert_str_eq(cJSON_GetObjectItem(job, "name")->valuestring, "stat");
    ck_assert_str_eq(cJSON_GetObjectItem(job, "state")->valuestring, "forming");
    ck_assert_int_eq(cJSON_GetObjectItem(job, "world_size")->valueint, 2);
    cJSON *member = cJSON_GetArrayItem(cJSON_GetObjectItem(job, "members"), 0);
    ck_assert_int_eq(cJSON_GetObjectItem(member, "rank")->valueint, 1);
    ck_assert_int_eq(cJSON_GetObjectItem(member, "pid")->valueint, waiting.pid);
    cJSON_Delete(root);
    proc_close(&ctl);

    /* The waiting log names the missing rank. */
    ck_assert_msg(proc_expect(&d.p, "job 'stat': 1/2 joined, missing ranks {0}", WAIT_MS, NULL, 0), "%s",
                  proc_output_tail(&d.p));

    const char *argv_table[] = {DDPCTL_PATH, "--coordinator", d.endpoint, "status", NULL};
    proc_start(&ctl, argv_table, NULL);
    ck_assert_int_eq(proc_wait(&ctl, WAIT_MS), 0);
    ck_assert_msg(strstr(proc_output(&ctl), "job 'stat': forming, 1/2 members"), "%s", proc_output_tail(&ctl));
    proc_close(&ctl);

    /* ddpctl against nothing: a clear error, not a hang, and an exit code of its own (3) */
    const char *argv_none[] = {DDPCTL_PATH, "--coordinator", "tcp://127.0.0.1:1", "--timeout-ms", "300", NULL};
    proc_start(&ctl, argv_none, NULL);
    ck_assert_int_eq(proc_wait(&ctl, WAIT_MS), 3);
    ck_assert(strstr(proc_output(&ctl), "no answer from ddpd at 'tcp://127.0.0.1:1' within 300 ms"));
    proc_close(&ctl);

    /* a status it cannot write out (a full disk) is a failure, said so */
    const char *argv_full[] = {"/bin/sh",   "-c",       "exec \"$0\" --coordinator \"$1\" status > /dev/full",
                               DDPCTL_PATH, d.endpoint, NULL};
    proc_start(&ctl, argv_full, NULL);
    ck_assert_int_eq(proc_wait(&ctl, WAIT_MS), 1);
    ck_assert_msg(strstr(proc_output(&ctl), "ddpctl: cannot write the output: No space left on device"), "%s",
                  proc_output_tail(&ctl));
    proc_close(&ctl);
    proc_close(&waiting);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

/* A scratch directory for ddpd: its socket (listen) and its --state-dir (state). */
static void state_dir_make(const char *name, char dir[64], char listen[128], char state[96]) {
    snprintf(dir, 64, "/tmp/ddp-%s-%d", name, (int)getpid());
    snprintf(listen, 128, "ipc://%s/ddpd.sock", dir);
    snprintf(state, 96, "%s/state", dir);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    ck_assert_int_eq(mkdir(state, 0700), 0);
}

static void state_dir_remove(const char *dir, const char *state) {
    char path[128];
    snprintf(path, sizeof(path), "%s/generation", state);
    unlink(path);
    rmdir(state);
    rmdir(dir);
}

/* ddpd restarts under a running job (SIGTERM, then SIGKILL: a crash): the members go on
 * with their barriers (in shared memory, then through ddpd: DDP_TRANSPORT=zmq, where a
 * barrier the old ddpd never answered is asked of the new one), rejoin the next ddpd at
 * the same endpoint, which takes the job back with its generation and its store, and gives
 * the next job the next generation; members whose ddpd does not come back stop when their
 * wait runs out, saying so. */
START_TEST(test_ddpd_restart) {
    char dir[64], listen[128], state[96], line[512];
    state_dir_make("restart", dir, listen, state);
    const char *flags[] = {"--listen", listen, "--state-dir", state, NULL};
    ddpd_proc d;
    ddpd_start(&d, flags);
    for (int crash = 0; crash < 2; crash++) {
        char job[32];
        snprintf(job, sizeof(job), "restart-%d", crash);
        const char *args[] = {"/usr/bin/env",
                              crash ? "DDP_TRANSPORT=zmq" : "DDP_TRANSPORT=auto",
                              MEMBER_PATH,
                              "--barriers",
                              "50",
                              "--late-ms",
                              "40",
                              "--keep-key",
                              "1",
                              NULL};
        proc m[2];
        for (int r = 0; r < 2; r++)
            rank_start(&m[r], &d, 2, r, job, args);
        for (int r = 0; r < 2; r++)
            ck_assert_msg(proc_expect(&m[r], "barrier 3 ok", WAIT_MS, NULL, 0), "%s", proc_output_tail(&m[r]));
        if (crash) {
            proc_signal(&d.p, SIGKILL);
            proc_wait(&d.p, WAIT_MS);
            proc_close(&d.p);
        } else
            ck_assert_int_eq(ddpd_stop(&d), 0);
        ddpd_start(&d, flags);
        for (int r = 0; r < 2; r++) {
            ck_assert_msg(proc_expect(&m[r], "rejoined ddpd at", WAIT_MS, NULL, 0), "%s", proc_output_tail(&m[r]));
            ck_assert_msg(proc_expect(&m[r], "barrier 49 ok", WAIT_MS, NULL, 0), "%s", proc_output_tail(&m[r]));
            ck_assert_msg(proc_expect(&m[r], "kept: 'set before'", WAIT_MS, NULL, 0), "%s", proc_output_tail(&m[r]));
            ck_assert_int_eq(proc_wait(&m[r], WAIT_MS), 0);
            ck_assert_msg(!strstr(proc_output(&m[r]), "failed"), "%s", proc_output_tail(&m[r]));
            proc_close(&m[r]);
        }
        ck_assert_msg(proc_expect(&d.p, "recovered: every rank is back", WAIT_MS, line, sizeof(line)), "%s",
                      proc_output_tail(&d.p));
        char generation[64];
        snprintf(generation, sizeof(generation), "job '%s' (generation %d) recovered", job, crash + 1);
        ck_assert_msg(strstr(line, generation), "%s", line);
    }
    /* the generations go on from the state directory: after a clean stop from the last one
     * given (the second job was generation 2), after a crash (SIGKILL) from past it: ddpd
     * keeps the file a block of generations ahead */
    proc again[2];
    form_and_check(&d, 2, "after", NULL, again);
    all_exit_ok(again, 2);
    unsigned long long third = 0;
    ck_assert_msg(proc_expect(&d.p, "job 'after' formed: world size 2, generation ", WAIT_MS, line, sizeof(line)) &&
                      sscanf(strstr(line, "generation ") + 11, "%llu", &third) == 1 && third > 2,
                  "%s", proc_output_tail(&d.p));

    /* a ddpd that does not come back: the members stop once their wait runs out */
    const char *waiting[] = {
        "/usr/bin/env", "DDP_COORDINATOR_WAIT_MS=1000", MEMBER_PATH, "--barriers", "400", "--late-ms", "20", NULL};
    proc m[2];
    for (int r = 0; r < 2; r++)
        rank_start(&m[r], &d, 2, r, "gone", waiting);
    for (int r = 0; r < 2; r++)
        ck_assert_msg(proc_expect(&m[r], "barrier 3 ok", WAIT_MS, NULL, 0), "%s", proc_output_tail(&m[r]));
    ck_assert_int_eq(ddpd_stop(&d), 0);
    for (int r = 0; r < 2; r++) {
        ck_assert_msg(proc_expect(&m[r], "failed", WAIT_MS, line, sizeof(line)), "%s", proc_output_tail(&m[r]));
        ck_assert_msg(strstr(line, "and it did not come back within 1000 ms (DDP_COORDINATOR_WAIT_MS)"), "%s", line);
        ck_assert_int_eq(proc_wait(&m[r], WAIT_MS), 3);
        proc_close(&m[r]);
    }
    state_dir_remove(dir, state);
}
END_TEST

/* With a state directory, a rejoin that would rebuild a job is taken only of a generation
 * a ddpd before this one could have given (the file's at start-up): one at the block this
 * ddpd wrote ahead is refused, else each such rejoin, then a new job past the block, made
 * ddpd write the file again (two fsyncs on its loop), as often as a client liked. */
START_TEST(test_rejoin_past_start) {
    char dir[64], listen[128], state[96];
    state_dir_make("rejoin-past", dir, listen, state);
    const char *flags[] = {"--listen", listen, "--state-dir", state, NULL};
    ddpd_proc d;
    ddpd_start(&d, flags);
    void *ctx = zmq_ctx_new();
    Ddp__Join join = DDP__JOIN__INIT;
    join.data_plane = DDP_DATA_PLANE_VERSION;
    join.world_size = 1;
    join.rank = 0;
    join.mode = (char *)"ddp";
    join.pid = (uint32_t)getpid();
    join.host = (char *)"test";
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__JOIN, "first", -1, 0, 1);
    env.join = &join;
    void *first = raw_connect(ctx, d.endpoint);
    wire_msg msg;
    ck_assert_int_eq(raw_request(first, &env, WAIT_MS, &msg), 0); /* generation 1: the file says 1025 */
    ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__WELCOME);
    ck_assert_uint_eq(msg.env->welcome->generation, 1);
    wire_msg_close(&msg);
    join.generation = 1025;
    wire_envelope_init(&env, DDP__MSG_TYPE__JOIN, "claimed", -1, join.generation, 1);
    env.join = &join;
    void *claimer = raw_connect(ctx, d.endpoint);
    ck_assert_int_eq(raw_request(claimer, &env, WAIT_MS, &msg), 0);
    ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__REJECT);
    ck_assert_msg(
        strstr(msg.env->reject->reason, "a rejoin of generation 1025: no ddpd before this one gave one past 0"), "%s",
        msg.env->reject->reason);
    wire_msg_close(&msg);
    zmq_close(claimer);
    zmq_close(first);
    zmq_ctx_term(ctx);
    ck_assert_int_eq(ddpd_stop(&d), 0);
    state_dir_remove(dir, state);
}
END_TEST

/* ps through a ddpd restart while ranks are one step behind: they pushed step 0 and have
 * not pulled it when ddpd stops, though ddpd wrote its average in the segment. They rejoin
 * at step 1 (what the segment says, not what they pulled), pull step 0 there and push
 * step 1 to the new ddpd, which averages it.
 * Case 0: rank 1 has pulled step 0 and pushed step 1; rank 0 pushes step 1 before the job
 * recovers (rank 1 is stopped till then), so the push goes again after it.
 * Case 1: no rank has pulled step 0. */
START_TEST(test_ps_restart_behind) {
    char dir[64], listen[128], hold[96], holders[16], line[512];
    snprintf(dir, sizeof(dir), "/tmp/ddp-ps-behind-%d", (int)getpid());
    snprintf(listen, sizeof(listen), "ipc://%s/ddpd.sock", dir);
    snprintf(hold, sizeof(hold), "%s/hold", dir);
    snprintf(holders, sizeof(holders), "%d", _i + 1);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    const char *flags[] = {"--listen", listen, NULL};
    ddpd_proc d;
    ddpd_start(&d, flags);
    const char *args[] = {"/usr/bin/env", "DDP_TIMEOUT_MS=10000", MEMBER_PATH, "--ps", "3", "--ps-hold",
                          hold,           "--ps-holders",         holders,     NULL};
    proc m[2];
    for (int r = 0; r < 2; r++)
        rank_start(&m[r], &d, 2, r, "behind", args);
    ck_assert_msg(proc_expect(&m[0], "ps in shared memory: yes", WAIT_MS, NULL, 0), "%s", proc_output_tail(&m[0]));
    ck_assert_msg(proc_expect(&m[0], "ps average 0 in the segment", WAIT_MS, NULL, 0), "%s", proc_output_tail(&m[0]));
    if (_i == 0) {
        ck_assert_msg(proc_expect(&m[1], "ps pushed 1", WAIT_MS, NULL, 0), "%s", proc_output_tail(&m[1]));
        proc_signal(&m[1], SIGSTOP);
    }
    ck_assert_int_eq(ddpd_stop(&d), 0);
    ddpd_start(&d, flags);
    /* case 0: rank 0 is back (first: rank 1 is stopped); case 1: both are */
    ck_assert_msg(proc_expect(&d.p, _i == 0 ? "rank 0 rejoins after ddpd restarted" : "recovered: every rank is back",
                              WAIT_MS, NULL, 0),
                  "%s", proc_output_tail(&d.p));
    int fd = open(hold, O_CREAT | O_WRONLY, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
    if (_i == 0) {
        ck_assert_msg(proc_expect(&m[0], "ps pushed 1", WAIT_MS, NULL, 0), "%s", proc_output_tail(&m[0]));
        ck_assert_msg(!strstr(proc_output(&d.p), "recovered"), "the job recovered before rank 0 pushed: %s",
                      proc_output_tail(&d.p));
        proc_signal(&m[1], SIGCONT);
        ck_assert_msg(proc_expect(&d.p, "recovered: every rank is back", WAIT_MS, NULL, 0), "%s",
                      proc_output_tail(&d.p));
    }
    for (int r = 0; r < 2; r++) {
        ck_assert_msg(proc_expect(&m[r], "ps pulled 2:", WAIT_MS, line, sizeof(line)), "rank %d: %s", r,
                      proc_output_tail(&m[r]));
        ck_assert_msg(strstr(line, "ps pulled 2: 4.5"), "rank %d: %s", r, line);
        ck_assert_int_eq(proc_wait(&m[r], WAIT_MS), 0);
        proc_close(&m[r]);
    }
    ck_assert_int_eq(ddpd_stop(&d), 0);
    unlink(hold);
    rmdir(dir);
}
END_TEST

START_TEST(test_no_coordinator) {
    /* Port 1 on loopback: nothing listens. The default wait is 10 s; a test needs less. */
    proc m;
    const char *env[] = {"DDP_COORDINATOR=tcp://127.0.0.1:1", "WORLD_SIZE=2", "DDP_CONNECT_TIMEOUT_MS=300", NULL};
    const char *argv[] = {MEMBER_PATH, NULL};
    proc_start(&m, argv, env);
    char line[512];
    ck_assert(proc_expect(&m, "init failed", WAIT_MS, line, sizeof(line)));
    ck_assert_msg(strstr(line, "no coordinator answered at tcp://127.0.0.1:1 within 300 ms"), "%s", line);
    ck_assert_int_eq(proc_wait(&m, WAIT_MS), 2);
    proc_close(&m);
    /* where a program looks without being told: the lab service's socket; with
     * MASTER_ADDR or MASTER_PORT, torch's TCP rendezvous */
    static const struct {
        const char *env, *expected;
    } defaults[] = {{"DDP_NO_SUCH_VARIABLE=1", "at ipc:///run/ddp/ddpd.sock within"},
                    {"MASTER_PORT=1", "at tcp://127.0.0.1:1 within"}};
    for (size_t k = 0; k < sizeof(defaults) / sizeof(defaults[0]); k++) {
        const char *bare[] = {
            "/usr/bin/env", "-u",          "DDP_COORDINATOR", "-u",           "MASTER_ADDR",
            "-u",           "MASTER_PORT", defaults[k].env,   "WORLD_SIZE=2", "DDP_CONNECT_TIMEOUT_MS=300",
            MEMBER_PATH,    NULL};
        proc_start(&m, bare, NULL);
        ck_assert(proc_expect(&m, "init failed", WAIT_MS, line, sizeof(line)));
        ck_assert_msg(strstr(line, defaults[k].expected), "%s", line);
        ck_assert_int_eq(proc_wait(&m, WAIT_MS), 2);
        proc_close(&m);
    }
}
END_TEST

START_TEST(test_join_timeout) {
    ddpd_proc d;
    const char *args[] = {"--join-timeout", "1", NULL};
    ddpd_start(&d, args);
    proc m;
    member_start(&m, &d, 3, 2, "slow", NULL);
    char line[512];
    ck_assert(proc_expect(&m, "init failed", WAIT_MS, line, sizeof(line)));
    ck_assert_msg(strstr(line, "job 'slow' did not form within 1 s: 1/3 joined, missing ranks {0, 1}"), "%s", line);
    ck_assert_int_eq(proc_wait(&m, WAIT_MS), 2);
    proc_close(&m);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

START_TEST(test_bad_environment) {
    const char *env[] = {"DDP_COORDINATOR=tcp://127.0.0.1:1", "WORLD_SIZE=two", NULL};
    const char *argv[] = {MEMBER_PATH, NULL};
    proc m;
    proc_start(&m, argv, env);
    ck_assert(proc_expect(&m, "environment WORLD_SIZE='two' is not an integer", WAIT_MS, NULL, 0));
    ck_assert_int_eq(proc_wait(&m, WAIT_MS), 2);
    proc_close(&m);
}
END_TEST

/* Two hand-made members share a store. */
START_TEST(test_store) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    void *ctx = zmq_ctx_new();
    void *peer[2];
    uint64_t generation = 0;
    for (int i = 0; i < 2; i++) {
        peer[i] = raw_connect(ctx, d.endpoint);
        Ddp__Join join = DDP__JOIN__INIT;
        join.data_plane = DDP_DATA_PLANE_VERSION; /* as this build's libddp */
        join.world_size = 2;
        join.rank = i;
        join.pid = (uint32_t)(1000 + i);
        join.host = (char *)"test";
        Ddp__Envelope env;
        wire_envelope_init(&env, DDP__MSG_TYPE__JOIN, "kv", -1, 0, 1);
        env.join = &join;
        ck_assert_int_eq(wire_send(peer[i], NULL, 0, &env, NULL, 0), 0);
    }
    for (int i = 0; i < 2; i++) {
        wire_msg msg;
        ck_assert_int_eq(raw_next(peer[i], WAIT_MS, &msg), 0);
        ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__WELCOME);
        ck_assert_uint_eq(msg.env->welcome->rank, (unsigned)i);
        generation = msg.env->welcome->generation;
        wire_msg_close(&msg);
    }

    /* Rank 1 waits for a key rank 0 has not set yet. */
    Ddp__StoreWait wait = DDP__STORE_WAIT__INIT;
    char *keys[] = {(char *)"addr"};
    wait.keys = keys;
    wait.n_keys = 1;
    wait.timeout_ms = 20000;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__STORE_WAIT, "kv", 1, generation, 5);
    env.store_wait = &wait;
    ck_assert_int_eq(wire_send(peer[1], NULL, 0, &env, NULL, 0), 0);

    Ddp__StoreSet set = DDP__STORE_SET__INIT;
    set.key = (char *)"addr";
    set.value.data = (uint8_t *)"tcp://10.0.0.1:1";
    set.value.len = 16;
    wire_envelope_init(&env, DDP__MSG_TYPE__STORE_SET, "kv", 0, generation, 6);
    env.store_set = &set;
    wire_msg msg;
    ck_assert_int_eq(raw_request(peer[0], &env, WAIT_MS, &msg), 0);
    ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__STORE_VALUE);
    ck_assert_uint_eq(msg.env->seq, 6);
    wire_msg_close(&msg);

    ck_assert_int_eq(raw_next(peer[1], WAIT_MS, &msg), 0);
    ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__STORE_VALUE);
    ck_assert_uint_eq(msg.env->seq, 5);
    ck_assert(msg.env->store_value->found);
    ck_assert_mem_eq(msg.env->store_value->value.data, "tcp://10.0.0.1:1", 16);
    wire_msg_close(&msg);

    Ddp__StoreGet get = DDP__STORE_GET__INIT;
    get.key = (char *)"missing";
    wire_envelope_init(&env, DDP__MSG_TYPE__STORE_GET, "kv", 1, generation, 7);
    env.store_get = &get;
    ck_assert_int_eq(raw_request(peer[1], &env, WAIT_MS, &msg), 0);
    ck_assert(!msg.env->store_value->found);
    wire_msg_close(&msg);

    /* A wait that times out says so. */
    keys[0] = (char *)"never";
    wait.timeout_ms = 100;
    wire_envelope_init(&env, DDP__MSG_TYPE__STORE_WAIT, "kv", 1, generation, 8);
    env.store_wait = &wait;
    ck_assert_int_eq(raw_request(peer[1], &env, WAIT_MS, &msg), 0);
    ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__ERROR);
    ck_assert_int_eq(msg.env->error->code, -ETIMEDOUT);
    ck_assert_msg(strstr(msg.env->error->message, "store-wait for 'never' in job 'kv' timed out after 100 ms"), "%s",
                  msg.env->error->message);
    wire_msg_close(&msg);

    /* A value over the limit is refused by name, and nothing else changes. */
    set.value.len = DDP_MAX_STORE_VALUE + 1;
    set.value.data = calloc(1, set.value.len);
    wire_envelope_init(&env, DDP__MSG_TYPE__STORE_SET, "kv", 0, generation, 9);
    env.store_set = &set;
    ck_assert_int_eq(raw_request(peer[0], &env, WAIT_MS, &msg), 0);
    free(set.value.data);
    ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__ERROR);
    ck_assert_msg(strstr(msg.env->error->message, "store-set: value of 1048577 bytes exceeds 1048576"), "%s",
                  msg.env->error->message);
    wire_msg_close(&msg);

    /* A stale generation is refused. */
    wire_envelope_init(&env, DDP__MSG_TYPE__STORE_GET, "kv", 1, generation + 1, 10);
    env.store_get = &get;
    ck_assert_int_eq(raw_request(peer[1], &env, WAIT_MS, &msg), 0);
    ck_assert_int_eq(msg.env->error->code, -ESTALE);
    wire_msg_close(&msg);

    for (int i = 0; i < 2; i++)
        zmq_close(peer[i]);
    zmq_ctx_term(ctx);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

/* A job in ps mode: ddpd averages pushes in rank order and refuses any that do not fit. */
static void *ps_member(void *ctx, const char *endpoint, const char *job, int rank, const uint64_t *layout, size_t n) {
    return raw_ps_join(ctx, endpoint, job, rank, layout, n, (uint32_t)(2000 + rank));
}

static int ps_push(void *s, const char *job, uint64_t generation, uint64_t step, uint32_t bucket, const float *data,
                   size_t n, uint64_t seq) {
    Ddp__GradPush body = DDP__GRAD_PUSH__INIT;
    body.step = step;
    body.bucket = bucket;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__GRAD_PUSH, job, -1, generation, seq);
    env.grad_push = &body;
    wire_frame f = {data, n * sizeof(float)};
    return wire_send(s, NULL, 0, &env, &f, 1);
}

/* The next message of member is the average of bucket 0, {2, 3, 4.25}, as a frame. */
static void expect_average_frame(void *member) {
    wire_msg msg;
    ck_assert_int_eq(raw_next(member, WAIT_MS, &msg), 0);
    ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__GRAD_AVG);
    ck_assert_uint_eq(msg.env->grad_avg->bucket, 0);
    ck_assert_msg(!msg.env->grad_avg->shared && msg.n_payload == 1, "told of the average in shared memory");
    ck_assert_uint_eq(zmq_msg_size(&msg.payload[0]), 3 * sizeof(float));
    float avg[3];
    memcpy(avg, zmq_msg_data(&msg.payload[0]), sizeof(avg));
    ck_assert_float_eq(avg[0], 2.0f);
    ck_assert_float_eq(avg[1], 3.0f);
    ck_assert_float_eq(avg[2], 4.25f);
    wire_msg_close(&msg);
}

START_TEST(test_parameter_server) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    void *ctx = zmq_ctx_new();
    const uint64_t layout[] = {3, 2}, other[] = {3, 3};
    void *a = ps_member(ctx, d.endpoint, "ps", 0, layout, 2);
    raw_wait_members(ctx, d.endpoint, "ps", 1, WAIT_MS); /* its layout is the job's */
    /* a member with another layout is refused, the job is not disturbed */
    void *odd = ps_member(ctx, d.endpoint, "ps", 1, other, 2);
    wire_msg msg;
    ck_assert_int_eq(raw_next(odd, WAIT_MS, &msg), 0);
    ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__REJECT);
    ck_assert_msg(strstr(msg.env->reject->reason, "gradient buckets"), "%s", msg.env->reject->reason);
    wire_msg_close(&msg);
    zmq_close(odd);
    void *b = ps_member(ctx, d.endpoint, "ps", 1, layout, 2);
    uint64_t generation = 0;
    void *members[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(raw_next(members[i], WAIT_MS, &msg), 0);
        ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__WELCOME);
        generation = msg.env->welcome->generation;
        wire_msg_close(&msg);
    }
    /* rank 1 pushes first: the average is still summed in rank order */
    const float x0[3] = {1, 2, 3}, x1[3] = {3, 4, 5.5f};
    ck_assert_int_eq(ps_push(b, "ps", generation, 0, 0, x1, 3, 10), 0);
    ck_assert_int_eq(ps_push(a, "ps", generation, 0, 0, x0, 3, 10), 0);
    for (int i = 0; i < 2; i++)
        expect_average_frame(members[i]);
    zmq_close(a);
    zmq_close(b);
    /* What does not fit the layout is refused, by name, and ends the job: the ranks that
     * pushed would wait for an average that never comes. A job for each case. */
    struct {
        uint64_t step;
        uint32_t bucket;
        size_t n;
        bool twice;
        const char *expected;
    } bad[] = {
        {0, 1, 3, false, "12 bytes where the layout says 2 f32 elements"},
        {0, 7, 2, false, "bucket 7: the job's layout has 2 buckets"},
        {5, 1, 2, false, "a push for step 5 while the job is at step 0"},
        {0, 1, 2, true, "rank 0 pushed step 0 twice"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char job[16];
        snprintf(job, sizeof(job), "ps-%zu", i);
        a = ps_member(ctx, d.endpoint, job, 0, layout, 2);
        b = ps_member(ctx, d.endpoint, job, 1, layout, 2);
        void *both[2] = {a, b};
        for (int k = 0; k < 2; k++) {
            ck_assert_int_eq(raw_next(both[k], WAIT_MS, &msg), 0);
            ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__WELCOME);
            generation = msg.env->welcome->generation;
            wire_msg_close(&msg);
        }
        if (bad[i].twice)
            ck_assert_int_eq(ps_push(a, job, generation, 0, 1, x0, 2, 30), 0);
        ck_assert_int_eq(ps_push(a, job, generation, bad[i].step, bad[i].bucket, x0, bad[i].n, 20 + i), 0);
        ck_assert_int_eq(raw_next(a, WAIT_MS, &msg), 0);
        ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__ERROR);
        ck_assert_msg(strstr(msg.env->error->message, bad[i].expected), "expected '%s' in '%s'", bad[i].expected,
                      msg.env->error->message);
        wire_msg_close(&msg);
        ck_assert_int_eq(raw_next(b, WAIT_MS, &msg), 0);
        ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__ABORT);
        ck_assert_msg(strstr(msg.env->abort->reason, bad[i].expected), "%s", msg.env->abort->reason);
        wire_msg_close(&msg);
        zmq_close(a);
        zmq_close(b);
    }
    /* A rank that leaves: the average it did not push cannot be made, and the one pushed
     * after it left neither; the others are told who left instead of waiting it out. */
    for (int order = 0; order < 2; order++) {
        char job[24];
        snprintf(job, sizeof(job), "ps-left-%d", order);
        a = ps_member(ctx, d.endpoint, job, 0, layout, 2);
        b = ps_member(ctx, d.endpoint, job, 1, layout, 2);
        void *both[2] = {a, b};
        for (int k = 0; k < 2; k++) {
            ck_assert_int_eq(raw_next(both[k], WAIT_MS, &msg), 0);
            ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__WELCOME);
            generation = msg.env->welcome->generation;
            wire_msg_close(&msg);
        }
        if (order == 0) { /* the push, and a request after it answered: ddpd has taken the push before b leaves */
            ck_assert_int_eq(ps_push(a, job, generation, 0, 0, x0, 3, 40), 0);
            Ddp__StoreGet get = DDP__STORE_GET__INIT;
            get.key = (char *)"after-the-push";
            Ddp__Envelope req;
            wire_envelope_init(&req, DDP__MSG_TYPE__STORE_GET, job, 0, generation, 43);
            req.store_get = &get;
            ck_assert_int_eq(raw_request(a, &req, WAIT_MS, &msg), 0);
            ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__STORE_VALUE);
            wire_msg_close(&msg);
        }
        Ddp__Leave leave = DDP__LEAVE__INIT;
        Ddp__Envelope env;
        wire_envelope_init(&env, DDP__MSG_TYPE__LEAVE, job, 1, generation, 41);
        env.leave = &leave;
        ck_assert_int_eq(wire_send(b, NULL, 0, &env, NULL, 0), 0);
        if (order == 1) {
            /* this job's leave (order 0's left the same line, but for its own job) */
            char left[96];
            snprintf(left, sizeof(left), "job '%s': rank 1 (pid 2001 on test) left", job);
            ck_assert_msg(proc_expect(&d.p, left, WAIT_MS, NULL, 0), "%s", proc_output_tail(&d.p));
            ck_assert_int_eq(ps_push(a, job, generation, 0, 0, x0, 3, 42), 0);
            ck_assert_int_eq(raw_next(a, WAIT_MS, &msg), 0);
            ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__ERROR);
            wire_msg_close(&msg);
        }
        ck_assert_int_eq(raw_next(a, WAIT_MS, &msg), 0);
        ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__ABORT);
        const char *expected = order == 0
                                   ? "rank 1 (pid 2001 on test) left the job without pushing bucket 0 of step 0"
                                   : "bucket 0: rank 1 (pid 2001 on test) left the job, so no average can be made";
        ck_assert_msg(strstr(msg.env->abort->reason, expected), "expected '%s' in '%s'", expected,
                      msg.env->abort->reason);
        wire_msg_close(&msg);
        zmq_close(a);
        zmq_close(b);
    }
    zmq_ctx_term(ctx);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

/* Rank r of a ps job on ddpd's host, as libddp's ps_client.c is: its push segment, handed
 * to ddpd over the Welcome's socket for the average segment and the doorbell. */
typedef struct {
    char *pushed, *average;
    int doorbell;
} ps_shared;

static void ps_share(const char *socket_name, int rank, size_t bytes, ps_shared *ret) {
    int fd = -1, sock = -1, average = -1;
    int32_t tag = -1;
    char why[128] = "";
    ck_assert_int_eq(shm_segment_make("test-ps-push", bytes, &fd), 0);
    ck_assert_int_eq(fd_socket_connect(socket_name, &sock), 0);
    ck_assert_int_eq(fd_socket_send(sock, fd, rank), 0);
    ck_assert_int_eq(fd_socket_recv(sock, clock_now_ms() + WAIT_MS, &average, &tag), 0);
    ck_assert_int_eq(fd_socket_recv(sock, clock_now_ms() + WAIT_MS, &ret->doorbell, &tag), 0);
    ck_assert_msg(shm_segment_map(fd, bytes, &ret->pushed, why, sizeof(why)) == 0, "%s", why);
    ck_assert_msg(shm_segment_map(average, bytes, &ret->average, why, sizeof(why)) == 0, "%s", why);
    close(fd);
    close(average);
    close(sock);
}

static void ps_ring(const ps_shared *m, size_t float_bytes, size_t bucket, uint64_t pushes) {
    shm_flag_set(ps_segment_counter(m->pushed, float_bytes, bucket), pushes);
    uint64_t one = 1;
    ck_assert_int_eq(write(m->doorbell, &one, sizeof(one)), sizeof(one));
}

/* Both ranks of a 2-rank ps job on ddpd's host, this process being both (ddpd checks the
 * pid that connects), joined: the Welcome's push-segment socket in socket_name. */
static uint64_t ps_join_both(void *ctx, const ddpd_proc *d, const char *job, const uint64_t *layout, size_t n,
                             void *members[2], char socket_name[FD_SOCKET_NAME_BYTES]) {
    uint64_t generation = 0;
    for (int r = 0; r < 2; r++)
        members[r] = raw_ps_join(ctx, d->endpoint, job, r, layout, n, (uint32_t)getpid());
    for (int r = 0; r < 2; r++) {
        wire_msg msg;
        ck_assert_int_eq(raw_next(members[r], WAIT_MS, &msg), 0);
        ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__WELCOME);
        ck_assert_msg(msg.env->welcome->ps_socket && msg.env->welcome->ps_socket[0], "no ps socket in the Welcome");
        snprintf(socket_name, FD_SOCKET_NAME_BYTES, "%s", msg.env->welcome->ps_socket);
        generation = msg.env->welcome->generation;
        wire_msg_close(&msg);
    }
    return generation;
}

/* ... and each with its push segment handed over. */
static uint64_t ps_shared_job(void *ctx, const ddpd_proc *d, const char *job, const uint64_t *layout, size_t n,
                              size_t bytes, void *members[2], ps_shared shared[2]) {
    char socket_name[FD_SOCKET_NAME_BYTES];
    uint64_t generation = ps_join_both(ctx, d, job, layout, n, members, socket_name);
    for (int r = 0; r < 2; r++)
        ps_share(socket_name, r, bytes, &shared[r]);
    return generation;
}

static void ps_shared_close(void *members[2], ps_shared shared[2], size_t bytes) {
    for (int r = 0; r < 2; r++) {
        munmap(shared[r].pushed, bytes);
        munmap(shared[r].average, bytes);
        close(shared[r].doorbell);
        zmq_close(members[r]);
    }
}

/* ps in shared memory with ddpd (server/ps_shm.h): each member raises its bucket's counter
 * in its push segment and rings the doorbell; ddpd averages in rank order and raises the
 * bucket's counter in the average segment, where the members read the average. A counter
 * that runs ahead of the job is a push ddpd refuses, naming the rank, and ends the job. */
START_TEST(test_ps_doorbell) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    void *ctx = zmq_ctx_new();
    const uint64_t layout[] = {3, 2};
    const size_t float_bytes = 5 * sizeof(float), bytes = ps_segment_bytes(float_bytes, 2);
    void *members[2];
    ps_shared shared[2];
    ps_shared_job(ctx, &d, "bell", layout, 2, bytes, members, shared);
    const float x0[3] = {1, 2, 3}, x1[3] = {3, 4, 5.5f};
    memcpy(shared[1].pushed, x1, sizeof(x1)); /* rank 1 first: still summed in rank order */
    ps_ring(&shared[1], float_bytes, 0, 1);
    memcpy(shared[0].pushed, x0, sizeof(x0));
    ps_ring(&shared[0], float_bytes, 0, 1);
    shm_flag averaged = ps_segment_counter(shared[0].average, float_bytes, 0);
    uint64_t deadline = clock_now_ms() + WAIT_MS;
    while (atomic_load(averaged.value) < 1 && clock_now_ms() < deadline)
        shm_flag_sleep(averaged, 1, 20);
    ck_assert_uint_eq(atomic_load(averaged.value), 1);
    const float *avg = (const float *)shared[1].average;
    ck_assert_float_eq(avg[0], 2.0f);
    ck_assert_float_eq(avg[1], 3.0f);
    ck_assert_float_eq(avg[2], 4.25f);

    /* rank 0 says it has pushed bucket 1 six times: steps 0-4 never came */
    ps_ring(&shared[0], float_bytes, 1, 6);
    for (int r = 0; r < 2; r++) {
        wire_msg msg;
        ck_assert_int_eq(raw_next(members[r], WAIT_MS, &msg), 0);
        ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__ABORT);
        ck_assert_msg(strstr(msg.env->abort->reason,
                             "grad-push from rank 0 refused: bucket 1: a push for step 5 while the job is at step 0"),
                      "%s", msg.env->abort->reason);
        wire_msg_close(&msg);
    }
    ps_shared_close(members, shared, bytes);
    zmq_ctx_term(ctx);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

/* A member's connection to the push-segment socket that says nothing: ddpd reads it only
 * once it is readable, so its loop goes on (a status answers meanwhile); it is closed after
 * PS_SHM_WAIT_MS, and the ranks hand their segments over after it. */
START_TEST(test_ps_silent_connection) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    void *ctx = zmq_ctx_new();
    const uint64_t layout[] = {3};
    const size_t bytes = ps_segment_bytes(3 * sizeof(float), 1);
    void *members[2];
    char socket_name[FD_SOCKET_NAME_BYTES];
    ps_join_both(ctx, &d, "silent", layout, 1, members, socket_name);
    int silent = -1;
    ck_assert_int_eq(fd_socket_connect(socket_name, &silent), 0);
    const char *status[] = {DDPCTL_PATH, "--coordinator", d.endpoint, "status", NULL};
    proc ctl;
    proc_start(&ctl, status, NULL);
    ck_assert_msg(proc_wait(&ctl, WAIT_MS) == 0 && strstr(proc_output(&ctl), "job 'silent'"), "%s",
                  proc_output_tail(&ctl));
    proc_close(&ctl);
    ck_assert_msg(
        proc_expect(&d.p, "connected for a push segment and said nothing for 200 ms: closed", WAIT_MS, NULL, 0), "%s",
        proc_output_tail(&d.p));
    close(silent);
    ps_shared shared[2];
    for (int r = 0; r < 2; r++)
        ps_share(socket_name, r, bytes, &shared[r]);
    ps_shared_close(members, shared, bytes);
    zmq_ctx_term(ctx);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

/* Waits for a message of type with seq on socket, past heartbeats. */
static void expect_reply(void *socket, Ddp__MsgType type, uint64_t seq, const char *what) {
    uint64_t deadline = clock_now_ms() + WAIT_MS;
    for (;;) {
        wire_msg msg;
        ck_assert_msg(raw_next(socket, (int)clock_ms_until(deadline), &msg) == 0, "%s: no reply", what);
        bool found = msg.env->type == type && msg.env->seq == seq;
        bool other = !found && msg.env->type != DDP__MSG_TYPE__HEARTBEAT;
        char text[256];
        bool error = msg.env->type == DDP__MSG_TYPE__ERROR;
        snprintf(text, sizeof(text), "%s: a %s (seq %llu)%s%s", what, wire_type_name(msg.env->type),
                 (unsigned long long)msg.env->seq, error ? ": " : "", error ? msg.env->error->message : "");
        wire_msg_close(&msg);
        ck_assert_msg(!other, "%s", text);
        if (found)
            return;
    }
}

/* ddpd restarted after releasing a barrier whose release never reached one rank: that rank
 * comes back at the round before, asking for it again; the other, past it. The first is
 * released at once (the barrier completed: no rank passes one the others have not
 * reached), and both go on at the next round, whichever came back first. */
START_TEST(test_rejoin_barrier_rounds) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    void *ctx = zmq_ctx_new();
    for (int behind_first = 0; behind_first < 2; behind_first++) {
        char job[32];
        snprintf(job, sizeof(job), "rounds-%d", behind_first);
        void *r[2];
        for (int k = 0; k < 2; k++) {
            int rank = behind_first ? 1 - k : k; /* rank 1 is behind */
            r[rank] = raw_connect(ctx, d.endpoint);
            Ddp__Join join = DDP__JOIN__INIT;
            join.data_plane = DDP_DATA_PLANE_VERSION; /* as this build's libddp */
            join.world_size = 2;
            join.rank = rank;
            join.pid = (uint32_t)getpid();
            join.host = (char *)"test";
            join.generation = 5;
            join.barrier_round = rank == 1 ? 4 : 5;
            Ddp__Envelope env;
            wire_envelope_init(&env, DDP__MSG_TYPE__JOIN, job, rank, 5, 1);
            env.join = &join;
            ck_assert_int_eq(wire_send(r[rank], NULL, 0, &env, NULL, 0), 0);
            if (k == 0) { /* the first back rebuilds the job: the other comes after it */
                char line[96];
                snprintf(line, sizeof(line), "job '%s' (generation 5): rank %d rejoins", job, rank);
                ck_assert_msg(proc_expect(&d.p, line, WAIT_MS, NULL, 0), "%s", proc_output_tail(&d.p));
            }
            if (behind_first && k == 0) { /* it asks for its barrier again before the other is back */
                Ddp__Barrier b = DDP__BARRIER__INIT;
                b.round = 4;
                wire_envelope_init(&env, DDP__MSG_TYPE__BARRIER, job, rank, 5, 20);
                env.barrier = &b;
                ck_assert_int_eq(wire_send(r[rank], NULL, 0, &env, NULL, 0), 0);
            }
        }
        Ddp__Barrier b = DDP__BARRIER__INIT;
        Ddp__Envelope env;
        if (!behind_first) {
            b.round = 4;
            wire_envelope_init(&env, DDP__MSG_TYPE__BARRIER, job, 1, 5, 20);
            env.barrier = &b;
            ck_assert_int_eq(wire_send(r[1], NULL, 0, &env, NULL, 0), 0);
        }
        expect_reply(r[1], DDP__MSG_TYPE__BARRIER, 20, "rank 1's barrier 4");
        if (behind_first) { /* rank 0 raised the job's round: the waiting rank was released then */
            char line[96];
            snprintf(line, sizeof(line), "job '%s': rank 0 is back past barrier 4", job);
            ck_assert_msg(proc_expect(&d.p, line, WAIT_MS, NULL, 0), "%s", proc_output_tail(&d.p));
        }
        b.round = 5;
        for (int rank = 0; rank < 2; rank++) {
            wire_envelope_init(&env, DDP__MSG_TYPE__BARRIER, job, rank, 5, 30);
            env.barrier = &b;
            ck_assert_int_eq(wire_send(r[rank], NULL, 0, &env, NULL, 0), 0);
        }
        for (int rank = 0; rank < 2; rank++) {
            expect_reply(r[rank], DDP__MSG_TYPE__BARRIER, 30, "barrier 5");
            zmq_close(r[rank]);
        }
    }
    /* two rounds apart cannot be (the one behind would have had to pass a barrier the
     * other had not reached): the last back is refused, below the job's round or above
     * one a rank is behind */
    static const struct {
        const char *job;
        uint64_t rounds[3];
        const char *refused;
    } apart[] = {
        {"apart", {5, 3}, "rank 1 comes back at barrier round 3, job 'apart''s ranks at 5: "},
        {"ahead", {5, 6, 7}, "rank 2 comes back at barrier round 7, job 'ahead''s ranks at 6 and one a round behind"},
    };
    for (size_t c = 0; c < 2; c++) {
        int world = apart[c].rounds[2] ? 3 : 2;
        void *r[3];
        for (int rank = 0; rank < world; rank++) {
            r[rank] = raw_connect(ctx, d.endpoint);
            Ddp__Join join = DDP__JOIN__INIT;
            join.data_plane = DDP_DATA_PLANE_VERSION; /* as this build's libddp */
            join.world_size = (uint32_t)world;
            join.rank = rank;
            join.pid = (uint32_t)getpid();
            join.host = (char *)"test";
            join.generation = 6;
            join.barrier_round = apart[c].rounds[rank];
            Ddp__Envelope env;
            wire_envelope_init(&env, DDP__MSG_TYPE__JOIN, apart[c].job, rank, 6, 1);
            env.join = &join;
            ck_assert_int_eq(wire_send(r[rank], NULL, 0, &env, NULL, 0), 0);
            char line[96];
            snprintf(line, sizeof(line),
                     rank ? "job '%s': rank %d is back" : "job '%s' (generation 6): rank %d rejoins", apart[c].job,
                     rank);
            if (rank < world - 1) /* in order */
                ck_assert_msg(proc_expect(&d.p, line, WAIT_MS, NULL, 0), "%s", proc_output_tail(&d.p));
        }
        wire_msg msg;
        ck_assert_int_eq(raw_next(r[world - 1], WAIT_MS, &msg), 0);
        ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__REJECT);
        ck_assert_msg(strstr(msg.env->reject->reason, apart[c].refused), "%s", msg.env->reject->reason);
        wire_msg_close(&msg);
        for (int rank = 0; rank < world; rank++)
            zmq_close(r[rank]);
    }
    zmq_ctx_term(ctx);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

/* A rejoin's store keys count against its user's store quota as any set does: what does
 * not fit is left out, said in the log, and the rest is there. */
START_TEST(test_rejoin_store_quota) {
    ddpd_proc d;
    const char *flags[] = {"--user-store-mb", "0.001", NULL}; /* about 1 KB */
    ddpd_start(&d, flags);
    void *ctx = zmq_ctx_new();
    void *s = raw_connect(ctx, d.endpoint);
    static uint8_t big[2048], small[16];
    Ddp__StoreSet sets[2] = {DDP__STORE_SET__INIT, DDP__STORE_SET__INIT}, *set_ptrs[2] = {&sets[0], &sets[1]};
    sets[0].key = (char *)"small";
    sets[0].value = (ProtobufCBinaryData){sizeof(small), small};
    sets[1].key = (char *)"big";
    sets[1].value = (ProtobufCBinaryData){sizeof(big), big};
    Ddp__Join join = DDP__JOIN__INIT;
    join.data_plane = DDP_DATA_PLANE_VERSION; /* as this build's libddp */
    join.world_size = 2;
    join.rank = 0;
    join.pid = (uint32_t)getpid();
    join.host = (char *)"test";
    join.generation = 3;
    join.store = set_ptrs;
    join.n_store = 2;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__JOIN, "kept", -1, 3, 1);
    env.join = &join;
    ck_assert_int_eq(wire_send(s, NULL, 0, &env, NULL, 0), 0);
    ck_assert_msg(
        proc_expect(&d.p, "rank 0's store key did not fit back: store-set 'big' in job 'kept'", WAIT_MS, NULL, 0), "%s",
        proc_output_tail(&d.p));
    zmq_close(s);
    zmq_ctx_term(ctx);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

/* A rejoin brings back the ranks its job had lost as members too (they had left before
 * ddpd restarted): they count against --user-members with it, so one message cannot
 * bring a thousand past the quota; each once, though every rank that comes back names
 * them, so a job at the quota still recovers whole. */
START_TEST(test_rejoin_members_quota) {
    ddpd_proc d;
    const char *flags[] = {"--user-members", "4", NULL};
    ddpd_start(&d, flags);
    void *ctx = zmq_ctx_new();
    const uint32_t many_left[] = {1, 2, 3, 4}, one_left[] = {3};
    Ddp__Join join = DDP__JOIN__INIT;
    join.data_plane = DDP_DATA_PLANE_VERSION;
    join.world_size = 6;
    join.rank = 0;
    join.pid = (uint32_t)getpid();
    join.host = (char *)"test";
    join.generation = 3;
    join.left = (uint32_t *)many_left;
    join.n_left = 4;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__JOIN, "many-left", -1, 3, 1);
    env.join = &join;
    wire_msg msg;
    void *s = raw_connect(ctx, d.endpoint);
    ck_assert_int_eq(raw_request(s, &env, WAIT_MS, &msg), 0);
    ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__REJECT);
    ck_assert_msg(strstr(msg.env->reject->reason, "have 0 members, and this join would add 5: more than one user may "
                                                  "have (ddpd --user-members 4)"),
                  "%s", msg.env->reject->reason);
    wire_msg_close(&msg);
    zmq_close(s);

    /* world 4, rank 3 had left: ranks 0, 1 and 2 come back, each saying so */
    void *ranks[3];
    join.world_size = 4;
    join.left = (uint32_t *)one_left;
    join.n_left = 1;
    for (int r = 0; r < 3; r++) {
        join.rank = r;
        wire_envelope_init(&env, DDP__MSG_TYPE__JOIN, "one-left", -1, 3, 1);
        env.join = &join;
        ranks[r] = raw_connect(ctx, d.endpoint);
        ck_assert_int_eq(wire_send(ranks[r], NULL, 0, &env, NULL, 0), 0);
    }
    ck_assert_msg(proc_expect(&d.p, "recovered: every rank is back", WAIT_MS, NULL, 0), "%s", proc_output_tail(&d.p));
    ck_assert_msg(!strstr(proc_output(&d.p), "job 'one-left': rejected"), "%s", proc_output_tail(&d.p));
    for (int r = 0; r < 3; r++)
        zmq_close(ranks[r]);
    zmq_ctx_term(ctx);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

/* A rank that handed ddpd its push segment and then pushes its gradients in messages (it
 * could not map the average segment after all, and fell back to frames) hears of each
 * average as a frame, not as a counter in a segment it never mapped. */
START_TEST(test_ps_segment_then_frames) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    void *ctx = zmq_ctx_new();
    const uint64_t layout[] = {3};
    const size_t bytes = ps_segment_bytes(3 * sizeof(float), 1);
    void *members[2];
    ps_shared shared[2];
    uint64_t generation = ps_shared_job(ctx, &d, "fallback", layout, 1, bytes, members, shared);
    const float x0[3] = {1, 2, 3}, x1[3] = {3, 4, 5.5f};
    ck_assert_int_eq(ps_push(members[0], "fallback", generation, 0, 0, x0, 3, 10), 0);
    ck_assert_int_eq(ps_push(members[1], "fallback", generation, 0, 0, x1, 3, 10), 0);
    for (int r = 0; r < 2; r++)
        expect_average_frame(members[r]);
    ps_shared_close(members, shared, bytes);
    zmq_ctx_term(ctx);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

/* A job rebuilt from a rejoin after a restart (as anyone may claim to be) shows as
 * recovering in the status; a push "in shared memory" from a rank that handed ddpd no
 * segment is refused by name, even in such a job, which has no segments at all: ddpd
 * stays up. */
START_TEST(test_ps_shared_push_without_segment) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    void *ctx = zmq_ctx_new();
    const uint64_t layout[] = {3}, steps[] = {0};
    void *s = raw_connect(ctx, d.endpoint);
    Ddp__Join join = DDP__JOIN__INIT;
    join.data_plane = DDP_DATA_PLANE_VERSION; /* as this build's libddp */
    join.world_size = 2;
    join.rank = 0;
    join.mode = (char *)"ps";
    join.pid = (uint32_t)getpid();
    join.host = (char *)"test";
    join.ps_buckets = (uint64_t *)layout;
    join.n_ps_buckets = 1;
    join.ps_steps = (uint64_t *)steps;
    join.n_ps_steps = 1;
    join.generation = 7; /* a rejoin: the job is rebuilt as running */
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__JOIN, "claimed", -1, 7, 1);
    env.join = &join;
    ck_assert_int_eq(wire_send(s, NULL, 0, &env, NULL, 0), 0);
    ck_assert_msg(proc_expect(&d.p, "rank 0 rejoins after ddpd restarted", WAIT_MS, NULL, 0), "%s",
                  proc_output_tail(&d.p));
    /* the job is recovering, and its member says it waits on a rank the job has not: the
     * status still answers, and shows it */
    Ddp__Heartbeat hb = DDP__HEARTBEAT__INIT;
    hb.interval_ms = 1000;
    hb.liveness = 3;
    hb.waiting = true;
    hb.waiting_on = 1000;
    wire_envelope_init(&env, DDP__MSG_TYPE__HEARTBEAT, "claimed", 0, 7, 3);
    env.heartbeat = &hb;
    ck_assert_int_eq(wire_send(s, NULL, 0, &env, NULL, 0), 0);
    usleep(200 * 1000);
    const char *status[] = {DDPCTL_PATH, "--coordinator", d.endpoint, "status", NULL};
    proc ctl;
    proc_start(&ctl, status, NULL);
    ck_assert_msg(proc_wait(&ctl, WAIT_MS) == 0 && strstr(proc_output(&ctl), "recovering"), "%s",
                  proc_output_tail(&ctl));
    proc_close(&ctl);
    Ddp__GradPush body = DDP__GRAD_PUSH__INIT;
    body.shared = true;
    wire_envelope_init(&env, DDP__MSG_TYPE__GRAD_PUSH, "claimed", -1, 7, 2);
    env.grad_push = &body;
    wire_msg msg;
    ck_assert_int_eq(raw_request(s, &env, WAIT_MS, &msg), 0);
    ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__ERROR);
    ck_assert_msg(strstr(msg.env->error->message, "pushed in shared memory that rank 0 never handed over"), "%s",
                  msg.env->error->message);
    wire_msg_close(&msg);
    zmq_close(s);
    /* a rejoin of a generation no ddpd could have given is refused, saying so */
    s = raw_connect(ctx, d.endpoint);
    join.generation = 1ull << 60;
    wire_envelope_init(&env, DDP__MSG_TYPE__JOIN, "claimed-too", -1, join.generation, 1);
    env.join = &join;
    ck_assert_int_eq(raw_request(s, &env, WAIT_MS, &msg), 0);
    ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__REJECT);
    ck_assert_msg(strstr(msg.env->reject->reason, "a rejoin of generation 1152921504606846976: no ddpd gave one past"),
                  "%s", msg.env->reject->reason);
    wire_msg_close(&msg);
    zmq_close(s);
    zmq_ctx_term(ctx);
    ck_assert_int_eq(ddpd_stop(&d), 0); /* still running, and stops cleanly */
}
END_TEST

/* A rank of a ps job that rejoins a ddpd that restarted, at step, after a restart with
 * generation 7; its socket. */
static void *ps_rejoin(void *ctx, const char *endpoint, const char *job, int rank, uint64_t step) {
    const uint64_t layout[] = {3};
    Ddp__Join join = DDP__JOIN__INIT;
    join.data_plane = DDP_DATA_PLANE_VERSION;
    join.world_size = 2;
    join.rank = rank;
    join.mode = (char *)"ps";
    join.pid = (uint32_t)getpid();
    join.host = (char *)"test";
    join.ps_buckets = (uint64_t *)layout;
    join.n_ps_buckets = 1;
    join.ps_steps = &step;
    join.n_ps_steps = 1;
    join.generation = 7;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__JOIN, job, rank, 7, 1);
    env.join = &join;
    void *s = raw_connect(ctx, endpoint);
    ck_assert_int_eq(wire_send(s, NULL, 0, &env, NULL, 0), 0);
    return s;
}

/* The next heartbeat on s that asks for an average back: whom it asks, for bucket 0. */
static int32_t asked_to_give_back(void *s) {
    uint64_t deadline = clock_now_ms() + WAIT_MS;
    while (clock_now_ms() < deadline) {
        zmq_pollitem_t item = {.socket = s, .events = ZMQ_POLLIN};
        if (zmq_poll(&item, 1, 100) <= 0)
            continue;
        wire_msg msg;
        ck_assert_int_eq(wire_recv(s, false, 0, &msg), 0);
        bool asks = msg.env->type == DDP__MSG_TYPE__HEARTBEAT && msg.env->heartbeat->n_ps_average_from == 1;
        int32_t from = asks ? msg.env->heartbeat->ps_average_from[0] : -1;
        wire_msg_close(&msg);
        if (asks)
            return from;
    }
    ck_abort_msg("no heartbeat asked for an average back");
    return -1;
}

static int ps_give_back(void *s, const char *job, int rank, uint64_t step, const float *data) {
    Ddp__GradPush body = DDP__GRAD_PUSH__INIT;
    body.step = step;
    body.average = true;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__GRAD_PUSH, job, rank, 7, 0);
    env.grad_push = &body;
    wire_frame f = {data, 3 * sizeof(float)};
    return wire_send(s, NULL, 0, &env, &f, 1);
}

/* ddpd restarted having sent bucket 0's average of step 5 to rank 0 and not to rank 1: the
 * new ddpd asks rank 0 for it back and sends it on to rank 1 alone, drops rank 1's push of
 * step 5 (its second), and the job goes on at step 6. An average given back unasked ends
 * the job, saying so. */
START_TEST(test_ps_average_given_back) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    void *ctx = zmq_ctx_new();
    const float average[3] = {2, 3, 4.25f}, x0[3] = {1, 2, 3}, x1[3] = {3, 4, 5.5f};
    void *r0 = ps_rejoin(ctx, d.endpoint, "lost", 0, 6), *r1 = ps_rejoin(ctx, d.endpoint, "lost", 1, 5);
    ck_assert_msg(proc_expect(&d.p, "recovered: every rank is back", WAIT_MS, NULL, 0), "%s", proc_output_tail(&d.p));
    ck_assert_int_eq(asked_to_give_back(r1), 0); /* every rank hears whom ddpd asks */
    ck_assert_int_eq(asked_to_give_back(r0), 0);
    ck_assert_int_eq(ps_push(r1, "lost", 7, 5, 0, x1, 3, 10), 0); /* sent again: its average went */
    ck_assert_int_eq(ps_give_back(r0, "lost", 0, 5, average), 0);
    expect_average_frame(r1);
    ck_assert_msg(proc_expect(&d.p, "rank 0 gave back bucket 0's average of step 5", WAIT_MS, NULL, 0), "%s",
                  proc_output_tail(&d.p));
    ck_assert_int_eq(ps_push(r0, "lost", 7, 6, 0, x0, 3, 11), 0);
    ck_assert_int_eq(ps_push(r1, "lost", 7, 6, 0, x1, 3, 11), 0);
    expect_average_frame(r0); /* step 6's: rank 0 was not sent step 5's again */
    expect_average_frame(r1);
    zmq_close(r0);
    zmq_close(r1);

    r0 = ps_rejoin(ctx, d.endpoint, "unasked", 0, 6);
    r1 = ps_rejoin(ctx, d.endpoint, "unasked", 1, 5);
    ck_assert_int_eq(asked_to_give_back(r1), 0);
    ck_assert_int_eq(ps_give_back(r1, "unasked", 1, 5, average), 0);
    wire_msg msg;
    ck_assert_int_eq(raw_next(r1, WAIT_MS, &msg), 0);
    ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__ERROR);
    ck_assert_msg(
        strstr(msg.env->error->message, "rank 1 gave back an average of step 5, which ddpd did not ask of it"), "%s",
        msg.env->error->message);
    wire_msg_close(&msg);
    ck_assert_int_eq(raw_next(r0, WAIT_MS, &msg), 0);
    ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__ABORT);
    wire_msg_close(&msg);
    zmq_close(r0);
    zmq_close(r1);
    zmq_ctx_term(ctx);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

/* The rank asked to give an average back never does (a libddp that keeps none): once as
 * long as the ranks had to come back has passed, the job ends, naming the bucket and the
 * rank, though both members still answer. */
START_TEST(test_ps_average_never_given_back) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    void *ctx = zmq_ctx_new();
    void *r[2] = {ps_rejoin(ctx, d.endpoint, "kept-none", 0, 6), ps_rejoin(ctx, d.endpoint, "kept-none", 1, 5)};
    ck_assert_int_eq(asked_to_give_back(r[1]), 0);
    Ddp__Heartbeat hb = DDP__HEARTBEAT__INIT;
    hb.interval_ms = 1000;
    hb.liveness = 3;
    Ddp__Envelope env;
    bool aborted = false;
    uint64_t deadline = clock_now_ms() + 30000;
    while (!aborted && clock_now_ms() < deadline) {
        for (int k = 0; k < 2; k++) {
            wire_envelope_init(&env, DDP__MSG_TYPE__HEARTBEAT, "kept-none", k, 7, 0);
            env.heartbeat = &hb;
            ck_assert_int_eq(wire_send(r[k], NULL, 0, &env, NULL, 0), 0);
        }
        wire_msg msg;
        if (raw_next(r[1], 500, &msg) < 0)
            continue;
        ck_assert_int_eq(msg.env->type, DDP__MSG_TYPE__ABORT);
        ck_assert_msg(strstr(msg.env->abort->reason, "bucket 0: rank 0 did not give back its average of step 5 within "
                                                     "11.5 s of the job's recovery"),
                      "%s", msg.env->abort->reason);
        wire_msg_close(&msg);
        aborted = true;
    }
    ck_assert_msg(aborted, "the job was not ended");
    for (int k = 0; k < 2; k++)
        zmq_close(r[k]);
    zmq_ctx_term(ctx);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

START_TEST(test_ddpd_flags) {
    struct {
        const char *args[4];
        const char *expected;
    } cases[] = {
        {{"--heartbeat-ms", "5"}, "--heartbeat-ms: 5 is out of range [10, 60000]"},
        {{"--liveness", "x"}, "--liveness: 'x' is not an integer"},
        {{"--no-such-flag"}, "unknown option '--no-such-flag'"},
        {{"--log-level", "loud"}, "--log-level: 'loud' is not one of error warn info debug"},
        {{"--config", "/nonexistent/ddpd.conf"}, "/nonexistent/ddpd.conf: cannot open config file"},
        {{"--listen", "tcp://256.1.1.1:5", "--insecure"}, "Failed to bind 'tcp://256.1.1.1:5'"},
        {{"--listen", "tcp://256.1.1.1:5"}, "refusing to listen on tcp://256.1.1.1:5 without CURVE"},
        {{"--metrics-group", "no-such-group"}, "--metrics-group no-such-group: no such group"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *argv[8] = {DDPD_PATH};
        size_t n = 1;
        for (size_t k = 0; cases[i].args[k]; k++)
            argv[n++] = cases[i].args[k];
        proc p;
        proc_start(&p, argv, NULL);
        int code = proc_wait(&p, WAIT_MS);
        ck_assert_msg(code == 1 || code == 2, "%s exited %d", cases[i].args[0], code);
        ck_assert_msg(strstr(proc_output(&p), cases[i].expected), "expected '%s' in: %s", cases[i].expected,
                      proc_output_tail(&p));
        proc_close(&p);
    }
    const char *env[] = {"DDPD_HEARTBEAT_MS=99999999", NULL};
    const char *argv[] = {DDPD_PATH, NULL};
    proc p;
    proc_start(&p, argv, env);
    ck_assert_int_eq(proc_wait(&p, WAIT_MS), 2);
    ck_assert(strstr(proc_output(&p), "environment DDPD_HEARTBEAT_MS: 99999999 is out of range"));
    proc_close(&p);
}
END_TEST

/* Endpoints: a malformed one or a port out of range is a usage error (2); a live ipc://
 * path is not taken over, a stale one is reused, and a clean stop removes ours. */
START_TEST(test_ddpd_endpoints) {
    static const struct {
        const char *program, *flag, *value, *expected;
    } bad[] = {
        {DDPD_PATH, "--listen", "garbage", "use tcp://HOST:PORT or ipc://PATH"},
        {DDPD_PATH, "--listen", "tcp://127.0.0.1:99999", "the port is 1 to 65535, or *"},
        {DDPCTL_PATH, "--coordinator", "garbage", "use tcp://HOST:PORT or ipc://PATH"},
        {DDPCTL_PATH, "--coordinator", "tcp://127.0.0.1:*", "the port is 1 to 65535"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *argv[] = {bad[i].program, bad[i].flag, bad[i].value, NULL};
        proc p;
        proc_start(&p, argv, NULL);
        ck_assert_int_eq(proc_wait(&p, WAIT_MS), 2);
        ck_assert_msg(strstr(proc_output(&p), bad[i].expected), "%s %s: %s", bad[i].flag, bad[i].value,
                      proc_output_tail(&p));
        proc_close(&p);
    }

    char path[96], ep[128];
    snprintf(path, sizeof(path), "/tmp/check_rendezvous_%d.sock", (int)getpid());
    snprintf(ep, sizeof(ep), "ipc://%s", path);
    const char *argv[] = {DDPD_PATH, "--listen", ep, NULL};
    proc first, second;
    proc_start(&first, argv, NULL);
    ck_assert_msg(proc_expect(&first, "listening on", WAIT_MS, NULL, 0), "%s", proc_output_tail(&first));
    proc_start(&second, argv, NULL);
    ck_assert_int_eq(proc_wait(&second, WAIT_MS), 1);
    ck_assert_msg(strstr(proc_output(&second), "another process listens there"), "%s", proc_output_tail(&second));
    proc_close(&second);
    const char *status[] = {DDPCTL_PATH, "--coordinator", ep, "status", NULL}; /* the first still answers */
    proc p;
    proc_start(&p, status, NULL);
    ck_assert_msg(proc_wait(&p, WAIT_MS) == 0, "%s", proc_output_tail(&p));
    proc_close(&p);
    proc_signal(&first, SIGTERM);
    ck_assert_int_eq(proc_wait(&first, WAIT_MS), 0);
    proc_close(&first);
    ck_assert_msg(access(path, F_OK) != 0, "%s is still there after a clean stop", path);

    /* a socket file that nobody listens on (a ddpd that was killed): reused */
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
    close(fd);
    proc_start(&first, argv, NULL);
    ck_assert_msg(proc_expect(&first, "listening on", WAIT_MS, NULL, 0), "%s", proc_output_tail(&first));
    proc_signal(&first, SIGTERM);
    ck_assert_int_eq(proc_wait(&first, WAIT_MS), 0);
    proc_close(&first);
    /* a file that is not a socket: left alone */
    FILE *f = fopen(path, "w");
    fputs("mine", f);
    fclose(f);
    proc_start(&first, argv, NULL);
    ck_assert_int_eq(proc_wait(&first, WAIT_MS), 1);
    ck_assert_msg(strstr(proc_output(&first), "exists and is not a socket"), "%s", proc_output_tail(&first));
    proc_close(&first);
    ck_assert_int_eq(unlink(path), 0);
}
END_TEST

START_TEST(test_barrier_timeout) {
    /* over shared memory the ranks wait on each other and name who is missing; over
     * ZeroMQ (one rank asks for it, the others follow) ddpd keeps the barrier */
    static const struct {
        const char *transport, *job, *expected;
    } runs[] = {
        {"DDP_TRANSPORT=auto", "slow-barrier", "barrier #1 timed out after 300 ms waiting for rank 1"},
        {"DDP_TRANSPORT=zmq", "slow-barrier-zmq", "barrier 0 timed out after 300 ms: another rank has not reached it"},
    };
    ddpd_proc d;
    ddpd_start(&d, NULL);
    for (size_t k = 0; k < sizeof(runs) / sizeof(runs[0]); k++) {
        proc a, b;
        const char *hang[] = {"--barriers", "1", "--hang-at", "0", NULL};
        member_start(&b, &d, 2, 1, runs[k].job, hang);
        /* Rank 0 with a short collective timeout, started by hand to set DDP_TIMEOUT_MS. */
        char coord[300], job[64];
        snprintf(coord, sizeof(coord), "DDP_COORDINATOR=%s", d.endpoint);
        snprintf(job, sizeof(job), "DDP_JOB=%s", runs[k].job);
        const char *env[] = {coord, "WORLD_SIZE=2", "RANK=0", job, "DDP_TIMEOUT_MS=300", runs[k].transport, NULL};
        const char *argv[] = {MEMBER_PATH, NULL};
        proc_start(&a, argv, env);
        char line[512];
        ck_assert_msg(proc_expect(&a, "barrier 0 failed", WAIT_MS, line, sizeof(line)), "%s", proc_output_tail(&a));
        ck_assert_msg(strstr(line, runs[k].expected), "expected '%s' in: %s", runs[k].expected, line);
        ck_assert_int_eq(proc_wait(&a, WAIT_MS), 3);
        proc_close(&a);
        proc_close(&b);
    }
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

/* A rank that waits on one that finished and left hears so from ddpd at once, by name,
 * not at its timeout: in a barrier through shared memory, in an all-reduce through shared
 * memory and over ZeroMQ. */
START_TEST(test_member_left) {
    static const struct {
        const char *job, *transport, *all_reduce;
    } runs[] = {{"leave", "DDP_TRANSPORT=auto", "0"},
                {"leave-all-reduce", "DDP_TRANSPORT=auto", "1"},
                {"leave-zmq", "DDP_TRANSPORT=zmq", "1"}};
    ddpd_proc d;
    ddpd_start(&d, NULL);
    for (size_t k = 0; k < sizeof(runs) / sizeof(runs[0]); k++) {
        proc early, late;
        const char *one[] = {"/usr/bin/env", runs[k].transport,  MEMBER_PATH, "--barriers", "1",
                             "--all-reduce", runs[k].all_reduce, NULL};
        const char *two[] = {"/usr/bin/env", runs[k].transport,  MEMBER_PATH, "--barriers", "2",
                             "--all-reduce", runs[k].all_reduce, NULL};
        rank_start(&early, &d, 2, 0, runs[k].job, one);
        rank_start(&late, &d, 2, 1, runs[k].job, two);
        ck_assert_int_eq(proc_wait(&early, WAIT_MS), 0);
        char line[512];
        ck_assert_msg(proc_expect(&late, "barrier 1 failed", WAIT_MS, line, sizeof(line)), "%s",
                      proc_output_tail(&late));
        ck_assert_msg(strstr(line, "rank 0 (pid ") && strstr(line, "left the job"), "%s: %s", runs[k].job, line);
        ck_assert_int_eq(proc_wait(&late, WAIT_MS), 3);
        proc_close(&early);
        proc_close(&late);
    }
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

/* ddp_get_arrival_wait: the rank that comes early to each all-reduce (over shared memory)
 * counts the time it waited for the late one, which counts less; over ZeroMQ it is 0. */
START_TEST(test_arrival_wait) {
    static const struct {
        const char *job, *transport;
    } runs[] = {{"arrive", "DDP_TRANSPORT=auto"}, {"arrive-zmq", "DDP_TRANSPORT=zmq"}};
    ddpd_proc d;
    ddpd_start(&d, NULL);
    for (size_t k = 0; k < sizeof(runs) / sizeof(runs[0]); k++) {
        proc ranks[2];
        const char *argv[] = {"/usr/bin/env",
                              runs[k].transport,
                              MEMBER_PATH,
                              "--barriers",
                              "3",
                              "--all-reduce",
                              "1",
                              "--late-ms",
                              "500",
                              NULL};
        for (int r = 0; r < 2; r++)
            rank_start(&ranks[r], &d, 2, r, runs[k].job, argv);
        double waited[2];
        for (int r = 0; r < 2; r++) {
            char line[256];
            ck_assert_msg(proc_expect(&ranks[r], "arrival wait", WAIT_MS, line, sizeof(line)), "%s",
                          proc_output_tail(&ranks[r]));
            int code = -1;
            ck_assert_int_eq(sscanf(strstr(line, "arrival wait"), "arrival wait %lf s (%d)", &waited[r], &code), 2);
            ck_assert_int_eq(code, 0);
            ck_assert_int_eq(proc_wait(&ranks[r], WAIT_MS), 0);
            proc_close(&ranks[r]);
        }
        if (k == 0) /* three times 500 ms late: rank 0 waited a good part of it, though descheduled */
            ck_assert_msg(waited[0] >= 0.4 && waited[1] < waited[0], "rank 0 waited %.3f s, rank 1 %.3f s", waited[0],
                          waited[1]);
        else
            ck_assert_msg(waited[0] == 0 && waited[1] == 0, "over ZeroMQ: %.3f s and %.3f s", waited[0], waited[1]);
    }
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

START_TEST(test_death_while_forming) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    proc gone;
    member_start(&gone, &d, 2, 0, "fragile", NULL);
    ck_assert(proc_expect(&d.p, "joined (1/2)", WAIT_MS, NULL, 0));
    proc_signal(&gone, SIGKILL);
    ck_assert_msg(proc_expect(&d.p, "stopped answering while the job was forming", WAIT_MS, NULL, 0), "%s",
                  proc_output_tail(&d.p));
    proc_close(&gone);
    /* Rank 0 is free again: the job forms with newcomers. */
    proc members[2];
    form_and_check(&d, 2, "fragile", NULL, members);
    all_exit_ok(members, 2);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

START_TEST(test_jobs_side_by_side) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    proc a[2], b[3];
    const char *args[] = {"--barriers", "20", NULL};
    for (int i = 0; i < 3; i++)
        member_start(&b[i], &d, 3, -1, "job-b", args);
    form_and_check(&d, 2, "job-a", args, a);
    for (int i = 0; i < 3; i++)
        ck_assert(proc_expect(&b[i], "barrier 19 ok", WAIT_MS, NULL, 0));
    for (int i = 0; i < 2; i++)
        ck_assert(proc_expect(&a[i], "barrier 19 ok", WAIT_MS, NULL, 0));
    all_exit_ok(b, 3);
    all_exit_ok(a, 2);
    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

/* A member that is stopped (SIGSTOP) is silent but still there: over ddpd's Unix socket,
 * where the kernel names each member's process, ddpd holds it stalled instead of dead,
 * ddpctl status says so, and when it continues the job goes on; stopped past
 * --stall-timeout, it ends the job, named with its state. */
START_TEST(test_stalled_member) {
    char sock_dir[64], listen[128], line[512];
    snprintf(sock_dir, sizeof(sock_dir), "/tmp/ddp-stall-%d", (int)getpid());
    ck_assert_int_eq(mkdir(sock_dir, 0700), 0);
    snprintf(listen, sizeof(listen), "ipc://%s/ddpd.sock", sock_dir);
    /* death after 600 ms of silence; a stall may last 10 s (below: 2 s) */
    const char *flags[] = {"--listen", listen, "--heartbeat-ms", "200", "--liveness", "3", "--stall-timeout",
                           "2",        NULL};
    const char *forgiving[] = {"--listen", listen, "--heartbeat-ms", "200", "--liveness", "3", "--stall-timeout",
                               "10",       NULL};
    ddpd_proc d;
    ddpd_start(&d, forgiving);
    const char *args[] = {"--barriers", "3", "--late-ms", "700", NULL};
    proc m[2];
    for (int r = 0; r < 2; r++)
        member_start(&m[r], &d, 2, r, "stall", args);
    for (int r = 0; r < 2; r++)
        ck_assert_msg(proc_expect(&m[r], "joined rank", WAIT_MS, NULL, 0), "%s", proc_output_tail(&m[r]));
    /* stopped past the death limit (until ddpd says so): stalled, shown, forgiven */
    proc_signal(&m[1], SIGSTOP);
    ck_assert_msg(proc_expect(&d.p, "its process T: stopped", WAIT_MS, line, sizeof(line)) &&
                      strstr(line, "rank 1 (pid ") && strstr(line, "stalled: silent for"),
                  "%s", proc_output_tail(&d.p));
    proc ctl;
    const char *status[] = {DDPCTL_PATH, "--coordinator", listen, "status", NULL};
    proc_start(&ctl, status, NULL);
    ck_assert_int_eq(proc_wait(&ctl, WAIT_MS), 0);
    ck_assert_msg(strstr(proc_output(&ctl), "stalled:") && strstr(proc_output(&ctl), "its process is T: stopped"), "%s",
                  proc_output_tail(&ctl));
    proc_close(&ctl);
    proc_signal(&m[1], SIGCONT);
    all_exit_ok(m, 2);
    ck_assert_msg(proc_expect(&d.p, "answers again after", WAIT_MS, NULL, 0), "%s", proc_output_tail(&d.p));

    ck_assert_int_eq(ddpd_stop(&d), 0);
    /* the same over loopback TCP, where the member's word says which process it is */
    const char *tcp_flags[] = {"--heartbeat-ms", "200", "--liveness", "3", "--stall-timeout", "10", NULL};
    ddpd_start(&d, tcp_flags);
    for (int r = 0; r < 2; r++)
        member_start(&m[r], &d, 2, r, "stall-tcp", args);
    for (int r = 0; r < 2; r++)
        ck_assert_msg(proc_expect(&m[r], "joined rank", WAIT_MS, NULL, 0), "%s", proc_output_tail(&m[r]));
    proc_signal(&m[1], SIGSTOP);
    ck_assert_msg(proc_expect(&d.p, "its process T: stopped", WAIT_MS, NULL, 0), "%s", proc_output_tail(&d.p));
    proc_signal(&m[1], SIGCONT);
    all_exit_ok(m, 2);
    ck_assert_msg(proc_expect(&d.p, "answers again after", WAIT_MS, NULL, 0), "%s", proc_output_tail(&d.p));
    ck_assert_int_eq(ddpd_stop(&d), 0);
    ddpd_start(&d, flags);

    /* stopped past the stall limit: the job ends, naming the member and its state */
    for (int r = 0; r < 2; r++)
        member_start(&m[r], &d, 2, r, "stall-2", args);
    ck_assert_msg(proc_expect(&m[1], "joined rank", WAIT_MS, NULL, 0), "%s", proc_output_tail(&m[1]));
    uint64_t t0 = clock_now_ms();
    proc_signal(&m[1], SIGSTOP);
    ck_assert_msg(proc_expect(&m[0], "failed", WAIT_MS, line, sizeof(line)), "%s", proc_output_tail(&m[0]));
    uint64_t noticed = clock_now_ms() - t0;
    ck_assert_msg(strstr(line, "rank 1 (pid ") && strstr(line, "stopped responding") &&
                      strstr(line, "(state T: stopped; ddpd --stall-timeout 2 s)"),
                  "%s", line);
    /* the limit counts from the member's last word, at most a beat before the stop (its
     * control thread's first beats are 500 ms apart, till ddpd's 200 ms is heard) */
    ck_assert_msg(noticed >= 1400 && noticed < 6000, "noticed after %llu ms", (unsigned long long)noticed);
    ck_assert_int_eq(proc_wait(&m[0], WAIT_MS), 3);
    /* when it continues, it is told how its job ended: not that it lost the coordinator */
    proc_signal(&m[1], SIGCONT);
    ck_assert_msg(proc_expect(&m[1], "failed", WAIT_MS, line, sizeof(line)), "%s", proc_output_tail(&m[1]));
    ck_assert_msg(strstr(line, "job 'stall-2' aborted: it ended ") &&
                      strstr(line, "while this rank (1) did not answer: rank 1 (pid ") &&
                      strstr(line, "stopped responding"),
                  "%s", line);
    ck_assert_int_eq(proc_wait(&m[1], WAIT_MS), 3);
    ck_assert_msg(proc_expect(&d.p, "rank 1 answers again", WAIT_MS, NULL, 0), "%s", proc_output_tail(&d.p));
    for (int r = 0; r < 2; r++)
        proc_close(&m[r]);
    ck_assert_int_eq(ddpd_stop(&d), 0);
    rmdir(sock_dir);
}
END_TEST

/* A rank whose program never comes back to libddp after its job ended (hung in its own
 * code) is ended by its watchdog, saying why, so that the job can form again. */
START_TEST(test_watchdog_ends_hung_rank) {
    ddpd_proc d;
    ddpd_start(&d, NULL);
    const char *busy[] = {"--barriers", "3", NULL};
    const char *hung[] = {
        "/usr/bin/env", "DDP_WATCHDOG_MS=1000", MEMBER_PATH, "--barriers", "3", "--hang-at", "1", NULL};
    proc m[2];
    member_start(&m[0], &d, 2, 0, "hung", busy);
    rank_start(&m[1], &d, 2, 1, "hung", hung);
    for (int r = 0; r < 2; r++)
        ck_assert_msg(proc_expect(&m[r], "barrier 0 ok", WAIT_MS, NULL, 0), "%s", proc_output_tail(&m[r]));
    proc_signal(&m[0], SIGKILL); /* the job ends; rank 1 hangs outside libddp */
    uint64_t t0 = clock_now_ms();
    char line[512];
    ck_assert_msg(proc_expect(&m[1], "watchdog ends the process", WAIT_MS, line, sizeof(line)), "%s",
                  proc_output_tail(&m[1]));
    ck_assert_msg(strstr(line, "(DDP_WATCHDOG_MS=1000)"), "%s", line);
    ck_assert_int_eq(proc_wait(&m[1], WAIT_MS), 128 + SIGABRT);
    uint64_t ended = clock_now_ms() - t0; /* the death's detection (1.5 s), then the watchdog's second */
    ck_assert_msg(ended >= 1000 && ended < 8000, "ended after %llu ms", (unsigned long long)ended);
    ck_assert_msg(strstr(proc_output(&m[1]), "job 'hung' aborted: rank 0 (pid "), "%s", proc_output_tail(&m[1]));
    for (int r = 0; r < 2; r++)
        proc_close(&m[r]);

    ck_assert_int_eq(ddpd_stop(&d), 0);
}
END_TEST

static TCase *case_of(Suite *s, TCase *tc) {
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);
    return tc;
}

int main(int argc, char **argv) {
    Suite *s = suite_create("rendezvous");
    /* four cases, each CTest's own (PER_CASE): they run side by side */
    TCase *join = case_of(s, tcase_create("join")), *faults = case_of(s, tcase_create("faults")),
          *restart = case_of(s, tcase_create("restart")), *ps = case_of(s, tcase_create("ps"));
    tcase_add_loop_test(join, test_world_sizes, 0, 4);
    tcase_add_test(join, test_duplicate_rank_rejected);
    tcase_add_test(join, test_version_mismatch_rejected);
    tcase_add_test(join, test_status_table_and_json);
    tcase_add_test(join, test_no_coordinator);
    tcase_add_test(join, test_join_timeout);
    tcase_add_test(join, test_bad_environment);
    tcase_add_test(join, test_store);
    tcase_add_test(join, test_ddpd_flags);
    tcase_add_test(join, test_ddpd_endpoints);
    tcase_add_test(faults, test_killed_member_named_within_3s);
    tcase_add_test(faults, test_garbage_flood);
    tcase_add_test(faults, test_unread_replies);
    tcase_add_test(faults, test_barrier_timeout);
    tcase_add_test(faults, test_member_left);
    tcase_add_test(faults, test_arrival_wait);
    tcase_add_test(faults, test_death_while_forming);
    tcase_add_test(faults, test_stalled_member);
    tcase_add_test(faults, test_watchdog_ends_hung_rank);
    tcase_add_test(faults, test_jobs_side_by_side);
    tcase_add_test(faults, test_late_abort_spares_relaunch);
    tcase_add_test(restart, test_ddpd_restart);
    tcase_add_loop_test(restart, test_ps_restart_behind, 0, 2);
    tcase_add_test(restart, test_rejoin_store_quota);
    tcase_add_test(restart, test_rejoin_barrier_rounds);
    tcase_add_test(restart, test_rejoin_past_start);
    tcase_add_test(restart, test_rejoin_members_quota);
    tcase_add_test(restart, test_stalled_remote_ddpd);
    tcase_add_test(restart, test_restart_after_a_rank_left);
    tcase_add_test(ps, test_parameter_server);
    tcase_add_test(ps, test_ps_doorbell);
    tcase_add_test(ps, test_ps_shared_push_without_segment);
    tcase_add_test(ps, test_ps_average_given_back);
    tcase_add_test(ps, test_ps_average_never_given_back);
    tcase_add_test(ps, test_ps_segment_then_frames);
    tcase_add_test(ps, test_ps_silent_connection);
    return check_main(s, argc, argv);
}
