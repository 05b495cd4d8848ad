#include "worker/trainer/buckets.h"

/* Each bucket is a contiguous range of the gradient block (layers are laid out first to
 * last), so it goes on the wire as it is. (PyTorch caps its first bucket at 1 MiB to start
 * communicating early; on two cores shared by two workers, overlap costs the backward more
 * than it hides, so the first bucket here is like the others.) */
void bucket_plan_make(bucket_plan *p, const model_spec *s, double bucket_mb, int split_layer) {
    size_t limit = (size_t)(bucket_mb * 1024 * 1024);
    p->n = 0;
    int last = s->n_layers - 1;
    for (int l = s->n_layers - 1; l >= 0; l--) {
        size_t off, count, next_count = 0;
        if (l > 0)
            model_layer_range(s, l - 1, last, &off, &next_count);
        /* with --devices, a bucket stays on one device: the second stage starts a bucket */
        if (l == 0 || next_count * sizeof(float) > limit || l == split_layer) {
            model_layer_range(s, l, last, &off, &count);
            p->first[p->n] = l;
            p->last[p->n] = last;
            p->count[p->n] = count;
            p->n++;
            last = l - 1;
        }
    }
}

void bucket_range(const bucket_plan *p, const model_spec *s, int k, size_t *ret_offset, size_t *ret_count) {
    model_layer_range(s, p->first[k], p->last[k], ret_offset, ret_count);
}
