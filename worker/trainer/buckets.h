/* Gradient buckets (ddp and ps modes): ranges of the gradient block, in reverse layer
 * order, each communicated as soon as backward has finished its layers. */
#pragma once
#include <stddef.h>

#include "worker/trainer/model.h"

typedef struct {
    int n;
    int first[MODEL_MAX_LAYERS], last[MODEL_MAX_LAYERS]; /* bucket k holds layers first..last */
    unsigned long long count[MODEL_MAX_LAYERS];          /* and this many elements */
} bucket_plan;

/* Buckets of up to bucket_mb MiB; a layer larger than that is a bucket of its own, and with
 * the model split (split_layer >= 0) no bucket straddles the devices. */
void bucket_plan_make(bucket_plan *p, const model_spec *s, double bucket_mb, int split_layer);
/* Bucket k's range in the flat layout. */
void bucket_range(const bucket_plan *p, const model_spec *s, int k, size_t *ret_offset, size_t *ret_count);
