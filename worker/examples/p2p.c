/* Point-to-point, as in "Writing Distributed Applications": rank 0 sends a tensor to
 * rank 1.   ddp-run -n 2 -- example-p2p   ->   "Rank 1 has data 1" */
#include "example.h"

int main(void) {
    ddp_group *g = example_init();
    float tensor[1] = {0};
    if (ddp_rank(g) == 0) {
        tensor[0] += 1;
        example_check(g, ddp_send(g, tensor, 1, DDP_F32, 1, 0), "send");
    } else if (ddp_rank(g) == 1) {
        example_check(g, ddp_recv(g, tensor, 1, DDP_F32, 0, 0), "recv");
    }
    printf("Rank %d has data %g\n", ddp_rank(g), tensor[0]);
    ddp_finalize(g);
    return 0;
}
