/* Gather: every rank contributes its rank; rank 0 collects them.
 *   ddp-run -n 4 -- example-gather   ->   "Rank 0 gathered [0, 1, 2, 3]" */
#include "example.h"

int main(void) {
    ddp_group *g = example_init();
    int n = ddp_world_size(g);
    float mine = (float)ddp_rank(g), *all = calloc((size_t)n, sizeof(float));
    example_check(g, ddp_gather(g, &mine, ddp_rank(g) == 0 ? all : NULL, 1, DDP_F32, 0), "gather");
    if (ddp_rank(g) == 0) {
        printf("Rank 0 gathered [");
        for (int i = 0; i < n; i++)
            printf(i ? ", %g" : "%g", all[i]);
        printf("]\n");
    }
    free(all);
    ddp_finalize(g);
    return 0;
}
