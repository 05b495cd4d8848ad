/* What every example does first and last: join the group from the environment that
 * ddp-run sets (like init_process_group with env://) and leave it. */
#pragma once
#include <stdio.h>
#include <stdlib.h>

#include "ddp/ddp.h"

static inline ddp_group *example_init(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    ddp_group *g;
    int r = ddp_init(NULL, &g);
    if (r < 0) {
        fprintf(stderr, "ddp_init: %s: %s\n", ddp_strerror(r), ddp_last_error(NULL));
        exit(1);
    }
    return g;
}

/* Ends the program on a failed call, saying what failed and why. */
static inline void example_check(ddp_group *g, int r, const char *what) {
    if (r < 0) {
        fprintf(stderr, "%s: %s: %s\n", what, ddp_strerror(r), ddp_last_error(g));
        ddp_finalize(g);
        exit(1);
    }
}
