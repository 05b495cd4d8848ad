/* Faults for the collective tests, as one rank of a group formed from the environment:
 *   coll_fault stress          all-reduce 4 MiB again and again until one fails
 *   coll_fault mismatch-count  rank r all-reduces 1000 + r elements
 *   coll_fault mismatch-kind   rank 0 all-reduces while the others broadcast
 *   coll_fault mismatch-barrier rank 0 enters a barrier while the others all-reduce
 *   coll_fault mismatch-root   ranks 0 and 1 broadcast, each naming the other the root
 *   coll_fault mismatch-roots  ranks 0 and 1 broadcast, each naming itself the root, then
 *                              all-reduce (a root that gives need not wait for anyone)
 *   coll_fault mismatch-rooted rank 0 scatters (root 0) while rank 1 gathers to it, then
 *                              all-reduce (neither waits for the other)
 *   coll_fault p2p-count       rank 0 sends 5 i32 (tag 1); rank 1 receives 4
 *   coll_fault p2p-empty       rank 0 sends 5 i32 (tag 1); rank 1 receives 0
 *   coll_fault p2p-flood       rank 0 sends 1100 messages of 1 MiB (tag 1), then one of
 *                              tag 3, which rank 1 waits for first: more than the 1 GiB
 *                              held for recvs to come
 *   coll_fault late            rank 1 never calls the all-reduce rank 0 waits in
 *   coll_fault one-absent      rank 2 never calls the all-reduce ranks 0 and 1 wait in
 *                              (rank 0 with a shorter DDP_TIMEOUT_MS than rank 1's)
 *   coll_fault too-late        rank 0's all-reduce times out (DDP_TIMEOUT_MS); rank 1 calls
 *                              it only then (when $DDP_FAULT_DIR/gave-up appears), and
 *                              rank 0 stays until rank 1 has its answer ($DIR/answered)
 *   coll_fault bad-offset      rank 0 all-reduces memory from ddp_alloc; rank 1 plays a
 *                              hostile member: it posts the same call in its own segment's
 *                              header, its input at an offset beyond its region
 *   coll_fault bad-region      the same, its input in a region it never shared
 *   coll_fault bad-root        the same as bad-offset, as the root of rank 0's broadcast
 *   coll_fault alloc-mismatch  rank r asks ddp_alloc for 4096 (r + 1) bytes
 *   coll_fault alloc-stranger  while rank 0 waits in ddp_alloc for rank 1 to fetch the
 *                              region, a process of the same user that is no rank connects
 *                              to every "ddp-shm-" socket it finds and asks for it; prints
 *                              "stranger: refused N, served M", then "alloc ok" per rank
 * Prints "first ok" after the first success, and on failure
 * "failed: CODE (TEXT): LAST_ERROR", exiting 3. */
#define _GNU_SOURCE /* SYS_futex */
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ddp/ddp.h"
#include "worker/libddp/shm_layout.h"

#define FORGED_COUNT (1u << 20) /* f32: the large algorithm, whose peers read inputs in place */

/* The slots of the host's segment (memfd:ddp-shm) this process maps: its own and its
 * peers', max of them, of equal size in rank order. */
static int segments(shm_head **heads, int max) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int n = 0;
    while (f && n == 0 && fgets(line, sizeof(line), f)) {
        unsigned long start, end;
        if (strstr(line, "/memfd:ddp-shm") && sscanf(line, "%lx-%lx", &start, &end) == 2)
            for (; n < max; n++)
                heads[n] = (shm_head *)(start + (end - start) / (unsigned long)max * (unsigned long)n);
    }
    if (f)
        fclose(f);
    return n;
}

/* Rank 1 of 2, without calling the collective (kind): once rank 0 has posted its call
 * (its arrival), posts the same call in its own header with its input in (region,
 * offset), as the phase rank 0 waits for. Its own segment is the one whose header does
 * not show rank 0's call. */
static int post_forged_input(coll_kind kind, int32_t region, uint64_t offset) {
    shm_head *heads[2], *theirs = NULL, *mine = NULL;
    if (segments(heads, 2) != 2) {
        printf("forging: no shared segment mapped\n");
        return -1;
    }
    /* the ranks have posted the same phases so far; rank 0 may already have posted one more */
    uint64_t before = atomic_load(&heads[0]->posted) < atomic_load(&heads[1]->posted) ? atomic_load(&heads[0]->posted)
                                                                                      : atomic_load(&heads[1]->posted);
    int slot = 0; /* the record of rank 0's call: as many came before it on both ranks */
    for (int tries = 0; !theirs && tries < 30000; tries++) { /* 30 s */
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < 2; j++)
                if (heads[k]->calls[j].kind == (uint32_t)kind && heads[k]->calls[j].count == FORGED_COUNT &&
                    atomic_load(&heads[k]->posted) > before) {
                    theirs = heads[k];
                    mine = heads[1 - k];
                    slot = j;
                }
        if (!theirs)
            usleep(1000);
    }
    if (!theirs) {
        printf("forging: rank 0 never posted its call\n");
        return -1;
    }
    shm_call forged = theirs->calls[slot];
    forged.region = region;
    forged.offset = offset;
    mine->calls[slot] = forged;
    uint64_t phase = atomic_load(&theirs->posted);
    atomic_store(&mine->posted, phase);
    atomic_store(&mine->word, (uint32_t)phase);
    syscall(SYS_futex, (uint32_t *)&mine->word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    printf("forged: region %d, offset %llu\n", (int)region, (unsigned long long)offset);
    return 0;
}

/* Asks the abstract socket name (as /proc/net/unix shows it, "@" first) for a descriptor:
 * 1 when one came, 0 when the other end closed or said nothing within 2 s. */
static int ask_for_descriptor(const char *name) {
    int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    size_t n = strnlen(name + 1, sizeof(addr.sun_path) - 2);
    memcpy(addr.sun_path + 1, name + 1, n);
    if (sock < 0 ||
        connect(sock, (struct sockaddr *)&addr, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) < 0) {
        if (sock >= 0)
            close(sock);
        return 0;
    }
    struct pollfd pfd = {.fd = sock, .events = POLLIN};
    char data[8], control[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {data, sizeof(data)};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof(control)};
    int got = poll(&pfd, 1, 2000) == 1 && recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) > 0 && CMSG_FIRSTHDR(&msg);
    close(sock);
    return got;
}

/* The stranger: every ddp-shm- socket of the host, once there is one (rank 0 listens until
 * rank 1 comes, and rank 1 waits for the stranger), looking for 10 s at most. */
static void stranger(void) {
    int refused = 0, served = 0;
    for (int tries = 0; tries < 200 && refused + served == 0; tries++) {
        usleep(50 * 1000);
        FILE *f = fopen("/proc/net/unix", "r");
        char line[512];
        while (f && fgets(line, sizeof(line), f)) {
            char *at = strstr(line, "@ddp-shm-");
            if (!at)
                continue;
            at[strcspn(at, " \n")] = '\0';
            if (ask_for_descriptor(at))
                served++;
            else
                refused++;
        }
        if (f)
            fclose(f);
    }
    printf("stranger: refused %d, served %d\n", refused, served);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "stress";
    setvbuf(stdout, NULL, _IOLBF, 0);
    ddp_group *g;
    int r = ddp_init(NULL, &g);
    if (r < 0) {
        printf("init failed: %s: %s\n", ddp_strerror(r), ddp_last_error(NULL));
        return 2;
    }
    int rank = ddp_rank(g);
    size_t count = 1u << 20;
    float *buf = calloc(count + 64, sizeof(float));
    if (!strcmp(mode, "stress")) {
        for (long i = 0; r == 0; i++) {
            r = ddp_all_reduce(g, buf, count, DDP_F32, DDP_SUM);
            if (r == 0 && i == 0)
                printf("first ok\n");
        }
    } else if (!strcmp(mode, "late")) { /* rank 1 never comes: rank 0 waits, heartbeating */
        printf("waiting\n");
        if (rank == 1)
            for (;;)
                pause();
        r = ddp_all_reduce(g, buf, count, DDP_F32, DDP_SUM);
    } else if (!strcmp(mode, "one-absent")) {
        if (rank == 2)
            for (;;)
                pause();
        r = ddp_all_reduce(g, buf, 1000, DDP_F32, DDP_SUM);
        if (rank == 0) { /* alive, as a program that caught the error and went on, until killed */
            printf("failed: %d (%s): %s\n", r, ddp_strerror(r), ddp_last_error(g));
            for (;;)
                pause();
        }
    } else if (!strcmp(mode, "too-late")) { /* rank 0 went on after its timeout: rank 1 must not complete it */
        const char *dir = getenv("DDP_FAULT_DIR");
        char gave_up[PATH_MAX], answered[PATH_MAX];
        snprintf(gave_up, sizeof(gave_up), "%s/gave-up", dir ? dir : ".");
        snprintf(answered, sizeof(answered), "%s/answered", dir ? dir : ".");
        if (rank == 1)
            for (int i = 0; i < 60000 && access(gave_up, F_OK) != 0; i++)
                usleep(1000);
        r = ddp_all_reduce(g, buf, 1000, DDP_F32, DDP_SUM);
        printf("rank %d: %s\n", rank, r == 0 ? "all-reduce done" : "all-reduce failed");
        FILE *f = fopen(rank == 0 ? gave_up : answered, "w");
        if (f)
            fclose(f);
        if (rank == 0) /* alive, as a program that caught the error and went on */
            for (int i = 0; i < 60000 && access(answered, F_OK) != 0; i++)
                usleep(1000);
    } else if (!strcmp(mode, "mismatch-count")) {
        r = ddp_all_reduce(g, buf, 1000 + (size_t)rank, DDP_F32, DDP_SUM);
    } else if (!strcmp(mode, "mismatch-kind")) {
        r = rank == 0 ? ddp_all_reduce(g, buf, 1000, DDP_F32, DDP_SUM) : ddp_broadcast(g, buf, 1000, DDP_F32, 0);
    } else if (!strcmp(mode, "mismatch-root")) { /* each names the other as the root: both wait as peers */
        r = ddp_broadcast(g, buf, 1000, DDP_F32, 1 - rank);
    } else if (!strcmp(mode, "mismatch-roots")) {
        r = ddp_broadcast(g, buf, 1000, DDP_F32, rank);
        if (r == 0)
            r = ddp_all_reduce(g, buf, 1000, DDP_F32, DDP_SUM);
    } else if (!strcmp(mode, "mismatch-rooted")) {
        r = rank == 0 ? ddp_scatter(g, buf, buf + 8000, 1000, DDP_F32, 0)
                      : ddp_gather(g, buf, buf + 8000, 1000, DDP_F32, 0);
        if (r == 0)
            r = ddp_all_reduce(g, buf, 1000, DDP_F32, DDP_SUM);
    } else if (!strcmp(mode, "p2p-count") || !strcmp(mode, "p2p-empty")) {
        int32_t msg[5] = {1, 2, 3, 4, 5};
        r = rank == 0 ? ddp_send(g, msg, 5, DDP_I32, 1, 1)
                      : ddp_recv(g, msg, !strcmp(mode, "p2p-count") ? 4 : 0, DDP_I32, 0, 1);
    } else if (!strcmp(mode, "p2p-flood")) {
        for (int m = 0; rank == 0 && r == 0 && m < 1100; m++) {
            buf[0] = (float)m;
            r = ddp_send(g, buf, count / 4, DDP_F32, 1, 1);
        }
        if (r == 0)
            r = rank == 0 ? ddp_send(g, buf, 1, DDP_F32, 1, 3) : ddp_recv(g, buf, 1, DDP_F32, 0, 3);
        if (r == 0 && rank == 1)
            printf("flood: tag 3 came\n");
    } else if (!strcmp(mode, "mismatch-barrier")) {
        r = rank == 0 ? ddp_barrier(g) : ddp_all_reduce(g, buf, 1000, DDP_F32, DDP_SUM);
    } else if (!strcmp(mode, "alloc-stranger")) {
        if (rank == 1) { /* rank 0 is in ddp_alloc, listening, until rank 1 comes */
            pid_t child = fork();
            if (child == 0) {
                stranger();
                _exit(0);
            }
            waitpid(child, NULL, 0);
        }
        if (!ddp_alloc(g, 4096))
            r = -1;
        else
            printf("alloc ok\n");
    } else if (!strcmp(mode, "alloc-mismatch")) {
        if (!ddp_alloc(g, 4096 * ((size_t)rank + 1)))
            r = -1;
    } else if (!strcmp(mode, "bad-offset") || !strcmp(mode, "bad-region") || !strcmp(mode, "bad-root")) {
        /* bad-root: rank 1 is a broadcast's root, whose buffer rank 0 would copy in place */
        bool broadcast = !strcmp(mode, "bad-root");
        float *shared = ddp_alloc(g, FORGED_COUNT * sizeof(float));
        if (!shared)
            r = -1;
        else if (rank == 0)
            r = broadcast ? ddp_broadcast(g, shared, FORGED_COUNT, DDP_F32, 1)
                          : ddp_all_reduce(g, shared, FORGED_COUNT, DDP_F32, DDP_SUM);
        else if (post_forged_input(broadcast ? COLL_BROADCAST : COLL_ALL_REDUCE, !strcmp(mode, "bad-region") ? 7 : 0,
                                   4096) == 0)
            for (int i = 0; i < 20000 && ddp_job_status(g) == 0; i++) /* until rank 0 has gone */
                usleep(1000);
    }
    if (r == -1) /* ddp_alloc's NULL */
        printf("failed: ddp_alloc: %s\n", ddp_last_error(g));
    else if (r < 0)
        printf("failed: %d (%s): %s\n", r, ddp_strerror(r), ddp_last_error(g));
    free(buf);
    ddp_finalize(g);
    return r < 0 ? 3 : 0;
}
