/* The devices a worker trains on: --device, or --devices for a model split over two. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "worker/trainer/trainer.h"

/* A CUDA error: the device is lost to this process. The job ends naming this rank (ddpd
 * tells the others at once), and the exit code says it was the device. */
static void device_failed(void *ctx, const char *what) {
    static volatile sig_atomic_t failing;
    trainer *t = ctx;
    if (!failing) { /* an error while leaving does not start over */
        failing = 1;
        fprintf(stderr, "ddp-worker: rank %d: %s\n", t->rank, what);
        if (t->g) {
            ddp_abort(t->g, what);
            ddp_finalize(t->g);
            t->g = NULL;
        }
    }
    exit(BACKEND_EXIT_DEVICE_ERROR);
}

/* "cuda" is LOCAL_RANK's GPU, as torchrun's workers pick theirs; "cuda:K" is GPU K of
 * those CUDA_VISIBLE_DEVICES leaves. */
static int device_parse(trainer *t, const char *dev, const char *flag, int *ret_gpu) {
    if (!strcmp(dev, "cpu")) {
        *ret_gpu = -1;
        return 0;
    }
    if (!strcmp(dev, "cuda")) {
        *ret_gpu = ddp_local_rank(t->g);
        return 0;
    }
    size_t digits = strncmp(dev, "cuda:", 5) == 0 ? strspn(dev + 5, "0123456789") : 0;
    if (digits == 0 || digits > 4 || dev[5 + digits])
        return trainer_refuse(t, -EINVAL, "%s '%s': use cpu, cuda or cuda:K", flag, dev);
    *ret_gpu = atoi(dev + 5);
    return 0;
}

static int device_open(trainer *t, backend *b, const char *dev, const char *flag) {
    int gpu = -1;
    TRY(device_parse(t, dev, flag, &gpu));
    if (gpu < 0) {
        int r = backend_cpu_open(b, t->opts->blas_threads);
        return r < 0 ? trainer_fail(t, r, "cannot start the CPU backend") : 0;
    }
#ifdef DDP_HAVE_CUDA
    char err[256];
    int r = backend_cuda_open(b, gpu, device_failed, t, err, sizeof(err));
    if (r == -ENODEV && !strcmp(dev, "cuda"))
        return trainer_fail(t, r, "%s cuda (GPU %d for LOCAL_RANK %d): %s; cuda:K names one GPU for every rank", flag,
                            gpu, ddp_local_rank(t->g), err);
    return r < 0 ? trainer_fail(t, r, "%s %s: %s", flag, dev, err) : 0;
#else
    (void)device_failed;
    return trainer_fail(t, -ENODEV, "%s %s: this ddp-worker was built without the CUDA backend; use cpu", flag, dev);
#endif
}

int devices_open(trainer *t) {
    const char *list = t->opts->devices;
    if (!list) {
        t->n_devices = 1;
        return device_open(t, &t->devices[0], t->opts->device, "--device");
    }
    char devs[2][24];
    const char *comma = strchr(list, ',');
    size_t first = comma ? (size_t)(comma - list) : 0;
    if (!comma || strchr(comma + 1, ',') || first == 0 || first >= 16 || !comma[1] || strlen(comma + 1) >= 16)
        return trainer_refuse(t, -EINVAL, "--devices '%s': name two devices, as in 0,1 or cuda:0,cuda:1", list);
    snprintf(devs[0], sizeof(devs[0]), "%.*s", (int)first, list);
    snprintf(devs[1], sizeof(devs[1]), "%s", comma + 1);
    for (int i = 0; i < 2; i++)
        if (strspn(devs[i], "0123456789") == strlen(devs[i])) { /* a bare number: that GPU */
            char number[16];
            snprintf(number, sizeof(number), "%.15s", devs[i]);
            snprintf(devs[i], sizeof(devs[i]), "cuda:%s", number);
        }
    t->n_devices = 2;
    TRY(device_open(t, &t->devices[0], devs[0], "--devices"));
    return device_open(t, &t->devices[1], devs[1], "--devices");
}
