/* Kills the process it is preloaded into in the middle of sending, as a crash or an OOM
 * kill can: at the DDP_TEST_KILL_AT_SEND_COUNT-th ZeroMQ frame of DDP_TEST_KILL_AT_SEND_BYTES
 * bytes, before it goes, after a pause in which the frames before it leave. Preloaded into
 * ddpd, with the bytes of a ps bucket and an even count of a two-rank job, it dies having
 * sent an average to one rank and not to the other (check_worker). */
#define _GNU_SOURCE /* RTLD_NEXT */
#include <dlfcn.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>
#include <zmq.h>

static atomic_long sent;

int zmq_msg_send(zmq_msg_t *msg, void *socket, int flags) {
    const char *bytes = getenv("DDP_TEST_KILL_AT_SEND_BYTES"), *count = getenv("DDP_TEST_KILL_AT_SEND_COUNT");
    if (bytes && count && zmq_msg_size(msg) == strtoul(bytes, NULL, 10) &&
        atomic_fetch_add(&sent, 1) + 1 == atol(count)) {
        /* ZeroMQ's I/O thread writes out the messages before this one, though starved (the
         * members may judge ddpd's silence meanwhile: they rejoin the next one all the same) */
        sleep(2);
        kill(getpid(), SIGKILL);
    }
    int (*next)(zmq_msg_t *, void *, int) = (int (*)(zmq_msg_t *, void *, int))dlsym(RTLD_NEXT, "zmq_msg_send");
    return next(msg, socket, flags);
}
