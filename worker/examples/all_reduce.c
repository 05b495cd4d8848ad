/* All-reduce, as in the tutorial: tensor = arange(2) + 1 + 2 * rank - 1, summed everywhere.
 *   ddp-run -n 4 -- example-all-reduce   ->   every rank: "Rank R has [12, 16]" */
#include "example.h"

int main(void) {
    ddp_group *g = example_init();
    int rank = ddp_rank(g);
    float t[2];
    for (int i = 0; i < 2; i++)
        t[i] = (float)i + 1 + 2 * rank - 1;
    example_check(g, ddp_all_reduce(g, t, 2, DDP_F32, DDP_SUM), "all_reduce");
    printf("Rank %d has [%g, %g]\n", rank, t[0], t[1]);
    ddp_finalize(g);
    return 0;
}
