#include "common/handshake_watch.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

int handshake_watch_start(handshake_watch *w, void *zmq_ctx, void *sock) {
    static _Atomic unsigned long counter;
    *w = (handshake_watch){.watched = sock};
    char name[64];
    snprintf(name, sizeof(name), "inproc://ddp-handshake-watch-%lu", (unsigned long)counter++);
    if (zmq_socket_monitor(sock, name,
                           ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_DISCONNECTED) < 0 ||
        !(w->monitor = zmq_socket(zmq_ctx, ZMQ_PAIR)) || zmq_connect(w->monitor, name) < 0) {
        int r = -errno;
        handshake_watch_stop(w);
        return r;
    }
    return 0;
}

handshake_outcome handshake_watch_read(handshake_watch *w) {
    zmq_msg_t event;
    zmq_msg_init(&event);
    while (w->monitor && zmq_msg_recv(&event, w->monitor, ZMQ_DONTWAIT) >= 0) {
        uint16_t code = 0;
        if (zmq_msg_size(&event) >= sizeof(code) && zmq_msg_more(&event)) { /* [event, value][endpoint] */
            memcpy(&code, zmq_msg_data(&event), sizeof(code));
            if (w->failed != ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) /* the telling one stays */
                w->failed = code;
        }
    }
    zmq_msg_close(&event);
    return w->failed == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH ? HANDSHAKE_KEY_REFUSED
           : w->failed                                  ? HANDSHAKE_MECHANISM_DIFFERS
                                                        : HANDSHAKE_OK;
}

void handshake_watch_stop(handshake_watch *w) {
    if (w->watched)
        zmq_socket_monitor(w->watched, NULL, 0); /* no more events */
    if (w->monitor)
        zmq_close(w->monitor);
    w->monitor = w->watched = NULL;
}
