/* average_gradients, as in the tutorial: after backward, every parameter's gradient is
 * all-reduced (SUM) and divided by the world size, so each rank steps with the gradient
 * of the whole batch.
 *
 * A linear model y = w.x + b with MSE on a synthetic batch of 64 samples, split evenly
 * across ranks. Each rank computes its shard's gradient, averages it, and checks it
 * against the full batch's gradient, which it can compute since the data is synthetic.
 *   ddp-run -n 4 -- example-average-gradients
 *   ->   "Rank R: averaged gradient matches the full batch (max difference ...)" */
#include <math.h>

#include "example.h"

#define FEATURES 4
#define BATCH 64

typedef struct {
    float *grad;
    size_t n;
} parameter;

static void average_gradients(ddp_group *g, parameter *params, int n_params) {
    float size = (float)ddp_world_size(g);
    for (int p = 0; p < n_params; p++) {
        example_check(g, ddp_all_reduce(g, params[p].grad, params[p].n, DDP_F32, DDP_SUM), "all_reduce");
        for (size_t i = 0; i < params[p].n; i++)
            params[p].grad[i] /= size;
    }
}

static float sample(int s, int f) { /* deterministic data: the same on every rank */
    return (float)((s * 7 + f * 3) % 11) / 11.0f - 0.5f;
}

/* Gradient of the mean squared error over samples [first, first + count). */
static void backward(const float *w, float b, int first, int count, float *dw, float *db) {
    for (int f = 0; f < FEATURES; f++)
        dw[f] = 0;
    *db = 0;
    for (int s = first; s < first + count; s++) {
        float y = b, target = sample(s, FEATURES);
        for (int f = 0; f < FEATURES; f++)
            y += w[f] * sample(s, f);
        float d = 2 * (y - target) / (float)count;
        for (int f = 0; f < FEATURES; f++)
            dw[f] += d * sample(s, f);
        *db += d;
    }
}

int main(void) {
    ddp_group *g = example_init();
    int rank = ddp_rank(g), n = ddp_world_size(g);
    if (BATCH % n) {
        fprintf(stderr, "the batch of %d does not split evenly over %d ranks\n", BATCH, n);
        ddp_finalize(g);
        return 2;
    }
    float w[FEATURES] = {0.1f, -0.2f, 0.3f, 0.05f}, b = 0.01f, dw[FEATURES], db;
    backward(w, b, rank * (BATCH / n), BATCH / n, dw, &db);
    parameter params[] = {{dw, FEATURES}, {&db, 1}};
    average_gradients(g, params, 2);

    float full_dw[FEATURES], full_db, diff;
    backward(w, b, 0, BATCH, full_dw, &full_db);
    diff = fabsf(db - full_db);
    for (int f = 0; f < FEATURES; f++)
        diff = fmaxf(diff, fabsf(dw[f] - full_dw[f]));
    printf("Rank %d: averaged gradient %s the full batch (max difference %.2g): dw = [%.5f, %.5f, %.5f, %.5f], "
           "db = %.5f\n",
           rank, diff < 1e-5f ? "matches" : "DIFFERS FROM", diff, dw[0], dw[1], dw[2], dw[3], db);
    ddp_finalize(g);
    return diff < 1e-5f ? 0 : 1;
}
