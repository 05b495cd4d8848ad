/* The data plane's frames (worker/libddp/comm_zmq.c over comm.c's checks), driven
 * statefully: a rank's real ZeroMQ data plane, fresh for each input, and a peer that sends
 * it the frames the input spells (headers valid or not, payloads of any size, parts
 * missing or extra) between recvs that the input spells too (which source, call and tag;
 * what range it must carry). A frame that is not what a recv asked for must be refused
 * by name, or wait in the matching queue; one it takes must be safe to read, copy and
 * reduce whole. */
#include <stdbool.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <zmq.h>

#include "common/clock.h"
#include "tests/fuzz/fuzz_input.h"
#include "worker/libddp/comm.h"

#define WORLD 4
#define GENERATION 7

static void *peer_ctx;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    peer_ctx = zmq_ctx_new();
    return 0;
}

/* A header the input shapes: valid fields chosen by its bytes, then some of them bent. */
static comm_header header_from(fuzz_cursor *in) {
    uint8_t shape = fuzz_byte(in);
    comm_header h = {
        .magic = COMM_MAGIC,
        .version = COMM_VERSION,
        .kind = (uint8_t)(1 + fuzz_byte(in) % 9),
        .dtype = (uint8_t)(fuzz_byte(in) % 9),
        .op = (uint8_t)(fuzz_byte(in) % 6),
        .src = 1 + fuzz_byte(in) % (WORLD - 1),
        .tag = (int8_t)fuzz_byte(in),
        .root = fuzz_byte(in) % WORLD,
        .generation = GENERATION,
        .seq = fuzz_byte(in) % 4,
        .count = fuzz_byte(in),
        .offset = fuzz_byte(in) % 8,
        .n = fuzz_byte(in) % 64,
    };
    if (shape & 1) { /* bend raw bytes of it */
        for (int k = 0; k < 4; k++) {
            uint8_t at = fuzz_byte(in) % sizeof(h);
            ((uint8_t *)&h)[at] ^= fuzz_byte(in);
        }
    }
    return h;
}

static void send_frame(void *push, fuzz_cursor *in) {
    comm_header h = header_from(in);
    uint8_t how = fuzz_byte(in);
    size_t es = h.dtype < DTYPE_COUNT ? dtype_size((dtype)h.dtype) : 1;
    size_t bytes = h.n < 1024 ? (size_t)h.n * es : 64;
    if (how & 1) /* a payload of the wrong size */
        bytes = fuzz_byte(in);
    uint8_t payload[1024 * 8] = {0};
    const uint8_t *fill;
    size_t got = fuzz_bytes(in, bytes < sizeof(payload) ? bytes : sizeof(payload), &fill);
    memcpy(payload, fill, got);
    if (how & 2) { /* the header alone */
        zmq_send(push, &h, sizeof(h), 0);
        return;
    }
    zmq_send(push, &h, (how & 4) ? sizeof(h) - 1 : sizeof(h), ZMQ_SNDMORE);
    zmq_send(push, payload, bytes < sizeof(payload) ? bytes : sizeof(payload), (how & 8) ? ZMQ_SNDMORE : 0);
    if (how & 8) /* a third part */
        zmq_send(push, "x", 1, 0);
}

static void receive(comm *c, fuzz_cursor *in) {
    comm_call call = {
        .kind = (coll_kind)(1 + fuzz_byte(in) % 8),
        .t = (dtype)(fuzz_byte(in) % DTYPE_COUNT),
        .op = (reduce_op)(fuzz_byte(in) % REDUCE_COUNT),
        .root = fuzz_byte(in) % WORLD,
        .seq = fuzz_byte(in) % 4,
        .count = fuzz_byte(in),
        .deadline_ms = clock_now_ms() + 3,
    };
    int src = 1 + fuzz_byte(in) % (WORLD - 1);
    int32_t tag = (int8_t)fuzz_byte(in);
    uint64_t offset = fuzz_byte(in) % 8, n = fuzz_byte(in) % 64;
    comm_frame *f = NULL;
    if (comm_recv(c, src, &call, tag, &f) < 0) {
        if (!c->error[0])
            __builtin_trap(); /* refused without saying why */
        return;
    }
    if (comm_expect_range(c, f, &call, offset, n) == 0) { /* what a collective does with a chunk */
        size_t bytes = (size_t)f->h.n * dtype_size(call.t);
        char *dst = malloc(bytes ? bytes : 1), *own = calloc(1, bytes ? bytes : 1);
        const void *view;
        comm_frame_copy_to(c, f, dst);
        comm_frame_data(c, f, &view);
        if (reduce_supported(call.t, call.op))
            comm_frame_reduce_pair(c, f, dst, own, call.op);
        free(dst);
        free(own);
    }
    comm_frame_free(c, f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char error[512];
    static job_end end;
    end = (job_end){.fd = eventfd(0, EFD_CLOEXEC)};
    comm c = {.timeout_ms = 3, .end = &end, .error = error, .error_size = sizeof(error)};
    char endpoint[256], *endpoints[WORLD] = {endpoint, endpoint, endpoint, endpoint}, key[CURVE_KEY_Z85];
    char *keys[WORLD] = {"", "", "", ""};
    /* this process is rank 1: the data plane's guard admits its connection as that rank, and
     * drops its frames that name another (no process has pid 0) */
    uint32_t pids[WORLD] = {0, (uint32_t)getpid(), 0, 0};
    bool here[WORLD] = {true, true, true, true};
    comm_peers peers = {.rank = 0,
                        .world = WORLD,
                        .generation = GENERATION,
                        .endpoints = endpoints,
                        .keys = keys,
                        .pids = pids,
                        .here = here};
    char listen[64]; /* an abstract Unix socket: no file, and quicker to set up than TCP */
    snprintf(listen, sizeof(listen), "ipc://@ddp-fuzz-frame-%d", (int)getpid());
    if (comm_zmq_open(&c) < 0 || comm_listen(&c, listen, endpoint, sizeof(endpoint), key) < 0 ||
        comm_start(&c, &peers) < 0)
        abort();
    void *push = zmq_socket(peer_ctx, ZMQ_PUSH);
    int linger = 0;
    zmq_setsockopt(push, ZMQ_LINGER, &linger, sizeof(linger));
    if (zmq_connect(push, endpoint) < 0)
        abort();
    fuzz_cursor in = {data, size};
    for (int ops = 0; in.size && ops < 32; ops++) {
        error[0] = '\0';
        if (fuzz_byte(&in) % 3)
            send_frame(push, &in);
        else
            receive(&c, &in);
    }
    zmq_close(push);
    comm_close(&c, true);
    close(end.fd);
    return 0;
}
