/* The settings every rank must share, checked once the job has formed: rank 0's are
 * broadcast and each rank compares its own, as DDP checks its parameters' shapes across
 * processes when it is built. A rank started with another --lr, --seed or --batch-size
 * (an environment variable or config file of its own host) would otherwise train on
 * without a word: parameters that drift apart, shards that overlap, gradients of unequal
 * batches averaged as equal. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "worker/trainer/trainer.h"

typedef enum { SETTING_INT, SETTING_REAL, SETTING_TEXT } setting_kind;

typedef struct {
    const char *what; /* the flag, or what of the data */
    setting_kind kind;
    const char *text; /* SETTING_TEXT: this rank's, of which the value is a digest */
} setting;

static uint64_t digest(const void *p, size_t n) { /* FNV-1a */
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const uint8_t *)p)[i]) * 1099511628211ull;
    return h;
}

static uint64_t real_bits(double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof(u));
    return u;
}

static void describe(const setting *s, uint64_t v, char *buf, size_t size) {
    double x;
    memcpy(&x, &v, sizeof(x));
    if (s->kind == SETTING_INT)
        snprintf(buf, size, "%lld", (long long)v);
    else if (s->kind == SETTING_REAL) /* the shortest that reads back as the same double */
        for (int digits = 6; digits <= 17 && (snprintf(buf, size, "%.*g", digits, x), strtod(buf, NULL) != x);)
            digits++;
    else
        snprintf(buf, size, "'%.200s'", s->text);
}

int trainer_agree(trainer *t) {
    const worker_options *o = t->opts;
    const dataset *d = &t->data;
    const model_spec *spec = &t->m.spec;
    /* what the flags make, where two spellings make the same: the layers (mlp or
     * 784-512-256-10), the buckets (ddp and ps modes; --bucket-mb and --devices make them),
     * the epochs only where --steps does not end the run first, nccl or libddp's own */
    uint64_t layers = digest(spec->sizes, (size_t)(spec->n_layers + 1) * sizeof(spec->sizes[0])) ^ (uint64_t)spec->loss;
    uint64_t buckets = strcmp(t->mode->name, "dp") ? digest(&t->buckets, sizeof(t->buckets)) : 0;
    const setting settings[] = {
        {"--model", SETTING_TEXT, o->model},
        {"--batch-size", SETTING_INT, NULL},
        {"--lr", SETTING_REAL, NULL},
        {"--momentum", SETTING_REAL, NULL},
        {"--seed", SETTING_INT, NULL},
        {"--sampler", SETTING_TEXT, o->sampler},
        {"--epochs", SETTING_INT, NULL},
        {"--steps", SETTING_INT, NULL},
        {"--bucket-mb or --devices (the gradient buckets they make)", SETTING_INT, NULL},
        {"--transport nccl (1: given)", SETTING_INT, NULL},
        {"--resume (1: given)", SETTING_INT, NULL},
        {"--metrics (1: given)", SETTING_INT, NULL},
        {"training samples in --data", SETTING_INT, NULL},
        {"test samples in --data", SETTING_INT, NULL},
        {"the training data in --data (a digest of its labels and pixels' mean)", SETTING_INT, NULL},
    };
    enum { N = sizeof(settings) / sizeof(settings[0]) };
    uint64_t mine[N] = {
        layers,
        (uint64_t)o->batch_size,
        real_bits(o->lr),
        real_bits(o->momentum),
        (uint64_t)o->seed,
        digest(o->sampler, strlen(o->sampler)),
        o->steps ? 0 : (uint64_t)o->epochs,
        (uint64_t)o->steps,
        buckets,
        !strcmp(o->transport, "nccl"),
        o->resume,
        o->metrics != NULL,
        d->train.n,
        d->test.n,
        dataset_fingerprint(d),
    };
    uint64_t theirs[N];
    memcpy(theirs, mine, sizeof(theirs));
    int r = ddp_broadcast(t->g, theirs, N, DDP_I64, 0);
    if (r < 0)
        return trainer_fail(t, r, "comparing the ranks' settings: %s", ddp_last_error(t->g));
    int differs = -1;
    for (int i = 0; i < N && differs < 0; i++)
        if (mine[i] != theirs[i])
            differs = i;
    /* every rank says so (the others name the rank that differs), none trains on */
    int32_t same = differs < 0, all_same = same;
    if ((r = ddp_all_reduce(t->g, &all_same, 1, DDP_I32, DDP_MIN)) < 0)
        return trainer_fail(t, r, "comparing the ranks' settings: %s", ddp_last_error(t->g));
    if (!all_same) /* every rank has the verdict before one's abort, next, can overtake it */
        (void)ddp_barrier(t->g);
    if (differs >= 0) {
        const setting *s = &settings[differs];
        char own[256], zero[256];
        describe(s, mine[differs], own, sizeof(own));
        if (s->kind == SETTING_TEXT)
            snprintf(zero, sizeof(zero), "another");
        else
            describe(s, theirs[differs], zero, sizeof(zero));
        return trainer_refuse(t, -EINVAL, "%s: this rank has %s, rank 0 %s: every rank must train alike", s->what, own,
                              zero);
    }
    if (!all_same)
        return trainer_refuse(t, -EINVAL, "another rank's settings are not rank 0's: see its error");
    return 0;
}
