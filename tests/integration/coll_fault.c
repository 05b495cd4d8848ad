/* Faults for the collective tests, as one rank of a group formed from the environment:
 *   coll_fault stress          all-reduce 4 MiB again and again until one fails
 *   coll_fault mismatch-count  rank r all-reduces 1000 + r elements
 *   coll_fault mismatch-kind   rank 0 all-reduces while the others broadcast
 *   coll_fault late            rank 1 never calls the all-reduce rank 0 waits in
 * Prints "first ok" after the first success, and on failure
 * "failed: CODE (TEXT): LAST_ERROR", exiting 3. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ddp/ddp.h"

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
    } else if (!strcmp(mode, "mismatch-count")) {
        r = ddp_all_reduce(g, buf, 1000 + (size_t)rank, DDP_F32, DDP_SUM);
    } else if (!strcmp(mode, "mismatch-kind")) {
        r = rank == 0 ? ddp_all_reduce(g, buf, 1000, DDP_F32, DDP_SUM) : ddp_broadcast(g, buf, 1000, DDP_F32, 0);
    }
    if (r < 0)
        printf("failed: %d (%s): %s\n", r, ddp_strerror(r), ddp_last_error(g));
    free(buf);
    ddp_finalize(g);
    return r < 0 ? 3 : 0;
}
