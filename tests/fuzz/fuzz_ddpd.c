/* ddpd's dispatch, in-process: a fresh server bound to an inproc endpoint for each input,
 * and three clients (DEALERs with routing ids of their own) sending it the messages the
 * input spells (client, frame count, each frame's length and bytes); the server answers
 * every one, then one housekeeping tick. Nothing a peer sends may crash it or make it
 * leak; a job it forms from the input is as real as any. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <zmq.h>

#include "common/log.h"
#include "server/server.h"
#include "tests/fuzz/fuzz_input.h"

#define CLIENTS 3

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    log_set_level(LOG_LEVEL_ERROR); /* a bad message is logged: millions of lines otherwise */
    return 0;
}

static void drain(void *socket) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    while (zmq_msg_recv(&m, socket, ZMQ_DONTWAIT) >= 0)
        ;
    zmq_msg_close(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    server s = {0};
    server_options opts = {.listen = "inproc://fuzz-ddpd",
                           .heartbeat_ms = 500,
                           .liveness = 3,
                           .join_timeout = 300,
                           .user_jobs = 4, /* small quotas: the input can reach them */
                           .user_members = 8,
                           .user_store_mb = 0.01,
                           .user_store_waits = 8,
                           .user_ps_mb = 1};
    int opened;
    while ((opened = server_open(&s, &opts)) == -EINTR) { /* libFuzzer's timer again */
        server_close(&s);
        s = (server){0};
    }
    if (opened < 0) {
        fprintf(stderr, "fuzz_ddpd: server_open: %s\n", zmq_strerror(-opened));
        abort();
    }
    void *clients[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        clients[i] = zmq_socket(s.zmq_ctx, ZMQ_DEALER);
        char id[16];
        int n = snprintf(id, sizeof(id), "client-%d", i), linger = 0;
        zmq_setsockopt(clients[i], ZMQ_ROUTING_ID, id, (size_t)n);
        zmq_setsockopt(clients[i], ZMQ_LINGER, &linger, sizeof(linger));
        int r; /* EINTR: libFuzzer's timer, while the connect waited on the context */
        while ((r = zmq_connect(clients[i], "inproc://fuzz-ddpd")) < 0 && zmq_errno() == EINTR)
            continue;
        if (r < 0) {
            fprintf(stderr, "fuzz_ddpd: connecting client %d: %s\n", i, zmq_strerror(zmq_errno()));
            abort();
        }
    }
    fuzz_cursor in = {data, size};
    for (int msgs = 0; in.size && msgs < 64; msgs++) {
        void *to = clients[fuzz_byte(&in) % CLIENTS];
        int frames = 1 + fuzz_byte(&in) % 4;
        for (int f = 0; f < frames; f++) {
            size_t len = (size_t)fuzz_byte(&in) | (size_t)(fuzz_byte(&in) & 0x0f) << 8;
            const uint8_t *bytes;
            len = fuzz_bytes(&in, len, &bytes);
            zmq_send(to, bytes, len, f < frames - 1 ? ZMQ_SNDMORE : 0);
        }
        zmq_pollitem_t item = {.socket = s.router, .events = ZMQ_POLLIN};
        int ready; /* what was sent is there: in-process; EINTR: libFuzzer's timer */
        while ((ready = zmq_poll(&item, 1, 0)) == 1 || (ready < 0 && zmq_errno() == EINTR))
            if (ready == 1)
                server_dispatch(&s);
        for (int i = 0; i < CLIENTS; i++)
            drain(clients[i]);
    }
    server_tick(&s);
    for (int i = 0; i < CLIENTS; i++)
        zmq_close(clients[i]);
    server_close(&s);
    return 0;
}
