/* The control plane's decoder and validation (common/wire.c) as ddpd meets them: the input
 * becomes one multipart message (a frame count, then each frame's length), sent over an
 * in-process DEALER to a ROUTER and taken apart by wire_recv. What it accepts must
 * validate again; what it refuses it must say. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <zmq.h>

#include "common/wire.h"
#include "tests/fuzz/fuzz_input.h"

static void *ctx, *router, *dealer;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    ctx = zmq_ctx_new();
    router = zmq_socket(ctx, ZMQ_ROUTER);
    dealer = zmq_socket(ctx, ZMQ_DEALER);
    wire_socket_setup(router, DDP_MAX_CONTROL_MSG_BYTES);
    if (zmq_bind(router, "inproc://fuzz-envelope") < 0 || zmq_connect(dealer, "inproc://fuzz-envelope") < 0)
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_cursor in = {data, size};
    int frames = 1 + fuzz_byte(&in) % (DDP_MAX_PAYLOAD_FRAMES + 2); /* one more than allowed, too */
    for (int f = 0; f < frames; f++) {
        size_t len = f == frames - 1 ? in.size : (size_t)fuzz_byte(&in) | (size_t)fuzz_byte(&in) << 8;
        const uint8_t *bytes;
        len = fuzz_bytes(&in, len, &bytes);
        int r;
        while ((r = zmq_send(dealer, bytes, len, f < frames - 1 ? ZMQ_SNDMORE : 0)) < 0 && zmq_errno() == EINTR)
            continue; /* libFuzzer's timer */
        if (r < 0)
            abort();
    }
    zmq_pollitem_t item = {.socket = router, .events = ZMQ_POLLIN};
    int ready;
    while ((ready = zmq_poll(&item, 1, 5000)) < 0 && zmq_errno() == EINTR) /* libFuzzer's timer */
        ;
    if (ready != 1)
        abort(); /* in-process: it is there, or the harness is broken */
    wire_msg msg;
    int r = wire_recv(router, true, ZMQ_DONTWAIT, &msg);
    char err[256];
    if (r == 0 && wire_validate(msg.env, msg.n_payload, err, sizeof(err)) != 0)
        __builtin_trap(); /* accepted, yet invalid */
    if (r < 0 && r != -EAGAIN && !msg.error[0])
        __builtin_trap(); /* refused without saying why */
    wire_msg_close(&msg);
    return 0;
}
