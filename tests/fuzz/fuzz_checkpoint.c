/* The checkpoint reader on any bytes: a corrupt file (magic, sizes, settings, CRC) is
 * refused with a message; nothing is read or written past the caller's arrays. The
 * expected model is a small one, so that an input can be a whole valid checkpoint. */
#include <stdlib.h>

#include "tests/fuzz/fuzz_input.h"
#include "worker/trainer/checkpoint.h"

#define N_PARAMS 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64], err[512];
    int fd = fuzz_file(data, size, path, sizeof(path));
    if (fd < 0)
        return 0;
    checkpoint_info expect = {.model = "4-2-2", .n_params = N_PARAMS}, got;
    float *params = malloc(N_PARAMS * sizeof(float)), *velocity = malloc(N_PARAMS * sizeof(float));
    if (checkpoint_read(path, &expect, &got, params, velocity, err, sizeof(err)) == 0 &&
        (got.n_params != N_PARAMS || strcmp(got.model, expect.model) != 0))
        __builtin_trap(); /* it took a checkpoint of another model */
    free(params);
    free(velocity);
    close(fd);
    return 0;
}
