/* A group member for the integration tests: joins through ddp_init() from the
 * environment (RANK, WORLD_SIZE, MASTER_ADDR/MASTER_PORT or DDP_COORDINATOR, DDP_JOB),
 * runs barriers and says what happened, one line per event:
 *   member [--barriers N] [--hang-at K] [--store 1] [--all-reduce 1]
 *   -> "joined rank R world W pid P timeout T ms"
 *   -> "barrier K ok" ... or "barrier K failed: CODE (TEXT): LAST_ERROR"
 * --all-reduce 1: the barriers are all-reduces of one int instead (the data plane's,
 * whatever the transport; ddpd keeps the barrier over ZeroMQ).
 * --late-ms M: the last rank sleeps M ms before each barrier; then every rank says how
 * long it waited for the others to arrive ("arrival wait S s").
 * --hang-at K waits forever before barrier K (a member the test will kill).
 * --store 1: rank 0 sets "greeting" after a while, every rank gets it ("store got 'V' (N
 * bytes)"), then every rank gets a key nobody sets ("store_get failed: ...").
 * --status 1: the last rank aborts the job ("rank N gives up"); the others poll
 * ddp_job_status until it says so ("job status CODE: LAST_ERROR"), at most 10 s.
 * --edges 1: the API's edges on a real group: "async without a request: CODE", then every
 * rank aborts and says "after abort: job status CODE: LAST_ERROR".
 * --recv-late-ms M: rank 0 sends rank 1 the int 42 (tag 7) M ms after the job formed;
 * rank 1 says "received V from rank 0", then what its data plane turned away ("refused C
 * connections and F frames: LAST"), so a test can try to slip its own frame in first.
 * --keep-key 1: rank 0 sets "kept" once the job forms; after the barriers every rank gets it
 * ("kept: 'V'"), so a test can restart ddpd in between and see the store come back.
 * --overwrite N: rank 0 sets "big" to N bytes, then again to N others ("overwrite ok", or
 *   "store_set K failed: CODE: LAST_ERROR"): a user's store quota counts the key once.
 * --leave-early PATH: the last rank leaves at once ("leaving"); the others wait for PATH
 *   (at most 60 s), then set and get a store key through ddpd ("store after: 'V'").
 * --abort-after-end PATH: once the job has ended ("job ended: LAST_ERROR"), waits for PATH
 *   (at most 30 s), then calls ddp_abort ("late abort: CODE"): a rank of a job that ended,
 *   giving up late, while a relaunch of the same name forms.
 * --ps N: the job is in mode ps with one bucket of 4 floats; N steps, rank r pushing
 *   (r + 1) * (step + 1) each: "ps pushed K", then "ps pulled K: A" (A the average).
 * --ps-late PATH: the last rank waits for PATH (at most 60 s) before its first push, so
 *   that the others' pushes of step 0 wait in ddpd meanwhile.
 * --ps-hold PATH: the ranks below --ps-holders H (default 1) wait between their push and
 *   their pull of step 0 until PATH exists (at most 60 s), so that a test can restart ddpd
 *   while they are one step behind; each says "ps average 0 in the segment" once ddpd
 *   wrote it in the segment it shares. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddp/ddp.h"

int main(int argc, char **argv) {
    int barriers = 1, hang_at = -1, store = 0, status = 0, edges = 0, all_reduce = 0, late_ms = 0, recv_late_ms = 0,
        keep_key = 0, ps = 0, ps_holders = 1;
    const char *ps_hold = NULL, *abort_after_end = NULL, *ps_late = NULL, *leave_early = NULL;
    long overwrite = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--barriers") == 0)
            barriers = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--hang-at") == 0)
            hang_at = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--store") == 0)
            store = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--status") == 0)
            status = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--edges") == 0)
            edges = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--all-reduce") == 0)
            all_reduce = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--late-ms") == 0)
            late_ms = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--recv-late-ms") == 0)
            recv_late_ms = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--keep-key") == 0)
            keep_key = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--ps") == 0)
            ps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--ps-hold") == 0)
            ps_hold = argv[i + 1];
        else if (strcmp(argv[i], "--ps-holders") == 0)
            ps_holders = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--leave-early") == 0)
            leave_early = argv[i + 1];
        else if (strcmp(argv[i], "--ps-late") == 0)
            ps_late = argv[i + 1];
        else if (strcmp(argv[i], "--overwrite") == 0)
            overwrite = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--abort-after-end") == 0)
            abort_after_end = argv[i + 1];
    }
    setvbuf(stdout, NULL, _IOLBF, 0);

    ddp_group *g = NULL;
    ddp_options opts = DDP_OPTIONS_INIT;
    const unsigned long long ps_bucket[] = {4};
    if (ps) {
        opts.mode = "ps";
        opts.ps_buckets = ps_bucket;
        opts.n_ps_buckets = 1;
    }
    int r = ddp_init(&opts, &g);
    if (r < 0) {
        printf("init failed: %d (%s): %s\n", r, ddp_strerror(r), ddp_last_error(NULL));
        return 2;
    }
    printf("joined rank %d world %d pid %d timeout %d ms\n", ddp_rank(g), ddp_world_size(g), (int)getpid(),
           ddp_timeout_ms(g));
    if (recv_late_ms && ddp_rank(g) == 0) {
        usleep((useconds_t)recv_late_ms * 1000);
        int value = 42;
        if ((r = ddp_send(g, &value, 1, DDP_I32, 1, 7)) < 0)
            printf("send failed: %d: %s\n", r, ddp_last_error(g));
    } else if (recv_late_ms && ddp_rank(g) == 1) {
        int value = 0;
        ddp_refusals refused;
        if ((r = ddp_recv(g, &value, 1, DDP_I32, 0, 7)) < 0)
            printf("recv failed: %d: %s\n", r, ddp_last_error(g));
        else if ((r = ddp_get_refusals(g, &refused)) < 0)
            printf("ddp_get_refusals failed: %d\n", r);
        else
            printf("received %d from rank 0\nrefused %llu connections and %llu frames: %s\n", value,
                   refused.connections, refused.frames, refused.last_connection);
    }
    if (overwrite > 0 && ddp_rank(g) == 0) {
        char *value = malloc((size_t)overwrite);
        for (int k = 0; value && k < 2 && r == 0; k++) {
            memset(value, 'a' + k, (size_t)overwrite);
            if ((r = ddp_store_set(g, "big", value, (size_t)overwrite)) < 0)
                printf("store_set %d failed: %d: %s\n", k, r, ddp_last_error(g));
        }
        if (r == 0)
            printf("overwrite ok\n");
        free(value);
    }
    if (leave_early) {
        if (ddp_rank(g) == ddp_world_size(g) - 1) {
            printf("leaving\n");
            ddp_finalize(g);
            return 0;
        }
        struct stat st;
        for (int i = 0; i < 6000 && stat(leave_early, &st) < 0; i++)
            usleep(10 * 1000);
        char value[32] = "";
        size_t len = 0;
        if ((r = ddp_store_set(g, "after", "restart", 7)) < 0 ||
            (r = ddp_store_get(g, "after", value, sizeof(value) - 1, &len)) < 0)
            printf("store after failed: %d: %s\n", r, ddp_last_error(g));
        else
            printf("store after: '%.*s'\n", (int)len, value);
        ddp_finalize(g);
        return r < 0 ? 3 : 0;
    }
    if (abort_after_end) {
        for (int i = 0; i < 3000 && ddp_job_status(g) == 0; i++)
            usleep(10 * 1000);
        printf("job ended: %s\n", ddp_last_error(g));
        struct stat st;
        for (int i = 0; i < 3000 && stat(abort_after_end, &st) < 0; i++)
            usleep(10 * 1000);
        printf("late abort: %d\n", ddp_abort(g, "giving up late"));
        ddp_finalize(g);
        return 0;
    }
    if (keep_key && ddp_rank(g) == 0 && (r = ddp_store_set(g, "kept", "set before", 10)) < 0)
        printf("store_set failed: %d: %s\n", r, ddp_last_error(g));
    for (int k = 0; k < barriers; k++) {
        if (k == hang_at)
            for (;;)
                pause();
        if (late_ms && ddp_rank(g) == ddp_world_size(g) - 1)
            usleep((useconds_t)late_ms * 1000);
        int one = 1;
        r = all_reduce ? ddp_all_reduce(g, &one, 1, DDP_I32, DDP_SUM) : ddp_barrier(g);
        if (r < 0) {
            printf("barrier %d failed: %d (%s): %s\n", k, r, ddp_strerror(r), ddp_last_error(g));
            ddp_finalize(g);
            return 3;
        }
        printf("barrier %d ok\n", k);
    }
    for (int k = 0; k < ps; k++) {
        float grads[4], avg[4];
        for (int i = 0; i < 4; i++)
            grads[i] = (float)((ddp_rank(g) + 1) * (k + 1));
        struct stat late;
        for (int i = 0;
             k == 0 && ps_late && ddp_rank(g) == ddp_world_size(g) - 1 && i < 6000 && stat(ps_late, &late) < 0; i++)
            usleep(10 * 1000);
        if ((r = ddp_ps_push(g, 0, grads)) < 0) {
            printf("ps push %d failed: %d: %s\n", k, r, ddp_last_error(g));
            return 3;
        }
        if (k == 0) /* with a ddpd on this host: through its segments (else frames) */
            printf("ps in shared memory: %s\n", ddp_ps_average(g, 0) ? "yes" : "no");
        printf("ps pushed %d\n", k);
        struct stat st;
        bool seen = false;
        for (int i = 0; k == 0 && ps_hold && ddp_rank(g) < ps_holders && i < 6000 && stat(ps_hold, &st) < 0; i++) {
            const volatile float *in_segment = ddp_ps_average(g, 0); /* written by ddpd: read as it changes */
            if (!seen && in_segment && in_segment[0] != 0) {
                printf("ps average 0 in the segment\n");
                seen = true;
            }
            usleep(10 * 1000);
        }
        if ((r = ddp_ps_pull(g, 0, avg)) < 0) {
            printf("ps pull %d failed: %d: %s\n", k, r, ddp_last_error(g));
            return 3;
        }
        printf("ps pulled %d: %g\n", k, avg[0]);
    }
    if (late_ms) {
        double waited = -1;
        r = ddp_get_arrival_wait(g, &waited);
        printf("arrival wait %.3f s (%d)\n", waited, r);
    }
    if (keep_key) {
        char value[64] = "";
        size_t size = 0;
        if ((r = ddp_store_get(g, "kept", value, sizeof(value) - 1, &size)) < 0)
            printf("store_get failed: %d: %s\n", r, ddp_last_error(g));
        else
            printf("kept: '%s'\n", value);
    }
    if (store) {
        if (ddp_rank(g) == 0) {
            usleep(200 * 1000); /* the others are waiting by now */
            const char greeting[] = "hello from rank 0";
            if ((r = ddp_store_set(g, "greeting", greeting, sizeof(greeting) - 1)) < 0)
                printf("store_set failed: %d: %s\n", r, ddp_last_error(g));
        }
        char value[64] = "";
        size_t size = 0;
        if ((r = ddp_store_get(g, "greeting", value, sizeof(value) - 1, &size)) < 0)
            printf("store_get failed: %d: %s\n", r, ddp_last_error(g));
        else
            printf("store got '%s' (%zu bytes)\n", value, size);
        if ((r = ddp_store_get(g, "never set", value, sizeof(value), &size)) < 0)
            printf("store_get failed: %d (%s): %s\n", r, ddp_strerror(r), ddp_last_error(g));
    }
    if (edges) {
        int x = 1;
        printf("async without a request: %d\n", ddp_all_reduce_async(g, &x, 1, DDP_I32, DDP_SUM, NULL));
        ddp_abort(g, "testing the edges");
        r = ddp_job_status(g);
        printf("after abort: job status %d: %s\n", r, ddp_last_error(g));
    }
    if (status) {
        if (ddp_rank(g) == ddp_world_size(g) - 1) {
            char reason[64];
            snprintf(reason, sizeof(reason), "rank %d gives up", ddp_rank(g));
            ddp_abort(g, reason);
        } else {
            int code = 0;
            for (int i = 0; i < 1000 && !(code = ddp_job_status(g)); i++)
                usleep(10 * 1000);
            printf("job status %d: %s\n", code, code ? ddp_last_error(g) : "still running");
        }
    }
    ddp_finalize(g);
    printf("finalized\n");
    return 0;
}
