/* Three ranks: rank 0 sends [1, 2, 3] to rank 1 and [4, 5, 6] to rank 2; each subtracts 1
 * and sends it back; rank 0 sums what came back.
 *   ddp-run -n 3 -- example-send-back   ->   "Rank 0 sum: [3, 5, 7]" */
#include "example.h"

int main(void) {
    ddp_group *g = example_init();
    if (ddp_world_size(g) != 3) {
        fprintf(stderr, "example-send-back needs 3 ranks\n");
        ddp_finalize(g);
        return 2;
    }
    float t[3];
    if (ddp_rank(g) == 0) {
        float one[3] = {1, 2, 3}, two[3] = {4, 5, 6}, back1[3], back2[3];
        example_check(g, ddp_send(g, one, 3, DDP_F32, 1, 0), "send to 1");
        example_check(g, ddp_send(g, two, 3, DDP_F32, 2, 0), "send to 2");
        example_check(g, ddp_recv(g, back1, 3, DDP_F32, 1, 0), "recv from 1");
        example_check(g, ddp_recv(g, back2, 3, DDP_F32, 2, 0), "recv from 2");
        for (int i = 0; i < 3; i++)
            t[i] = back1[i] + back2[i];
        printf("Rank 0 got back [%g, %g, %g] and [%g, %g, %g]\n", back1[0], back1[1], back1[2], back2[0], back2[1],
               back2[2]);
        printf("Rank 0 sum: [%g, %g, %g]\n", t[0], t[1], t[2]);
    } else {
        example_check(g, ddp_recv(g, t, 3, DDP_F32, 0, 0), "recv");
        for (int i = 0; i < 3; i++)
            t[i] -= 1;
        example_check(g, ddp_send(g, t, 3, DDP_F32, 0, 0), "send back");
        printf("Rank %d sent back [%g, %g, %g]\n", ddp_rank(g), t[0], t[1], t[2]);
    }
    ddp_finalize(g);
    return 0;
}
