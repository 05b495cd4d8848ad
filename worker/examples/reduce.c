/* Reduce: every rank holds ones; rank 0 receives their sum.
 *   ddp-run -n 4 -- example-reduce   ->   "Rank 0 has [4, 4, 4]" */
#include "example.h"

int main(void) {
    ddp_group *g = example_init();
    float t[3] = {1, 1, 1};
    example_check(g, ddp_reduce(g, t, 3, DDP_F32, DDP_SUM, 0), "reduce");
    if (ddp_rank(g) == 0)
        printf("Rank 0 has [%g, %g, %g]\n", t[0], t[1], t[2]);
    ddp_finalize(g);
    return 0;
}
