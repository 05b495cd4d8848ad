#include "common/zap_request.h"

#include <errno.h>
#include <string.h>
#include <zmq.h>

#define ZAP_MAX_FRAMES 8

/* A frame's bytes as text, cut to fit. */
static void frame_text(zmq_msg_t *m, char *dst, size_t size) {
    size_t n = zmq_msg_size(m) < size - 1 ? zmq_msg_size(m) : size - 1;
    memcpy(dst, zmq_msg_data(m), n);
    dst[n] = '\0';
}

int zap_request_read(void *socket, zap_request *ret) {
    *ret = (zap_request){0};
    zmq_msg_t part[ZAP_MAX_FRAMES];
    int n = 0, more = 1, r = 0;
    size_t more_size = sizeof(more);
    while (more) {
        zmq_msg_t extra, *m = n < ZAP_MAX_FRAMES ? &part[n] : &extra; /* extras: read, dropped */
        zmq_msg_init(m);
        if (zmq_msg_recv(m, socket, 0) < 0) {
            r = -zmq_errno();
            zmq_msg_close(m);
            break;
        }
        n++;
        if (m == &extra)
            zmq_msg_close(m);
        zmq_getsockopt(socket, ZMQ_RCVMORE, &more, &more_size);
    }
    int held = n < ZAP_MAX_FRAMES ? n : ZAP_MAX_FRAMES;
    /* version, request id, domain, address, routing id, mechanism, credentials... */
    if (r == 0 && n >= 6 && n <= ZAP_MAX_FRAMES && zmq_msg_size(&part[0]) == 3 &&
        memcmp(zmq_msg_data(&part[0]), "1.0", 3) == 0 && zmq_msg_size(&part[1]) <= sizeof(ret->request_id)) {
        ret->request_id_size = zmq_msg_size(&part[1]);
        memcpy(ret->request_id, zmq_msg_data(&part[1]), ret->request_id_size);
        frame_text(&part[3], ret->address, sizeof(ret->address));
        frame_text(&part[5], ret->mechanism, sizeof(ret->mechanism));
        ret->valid = true;
        if (strcmp(ret->mechanism, "CURVE") == 0) {
            ret->valid = n == 7 && zmq_msg_size(&part[6]) == 32;
            if (ret->valid)
                zmq_z85_encode(ret->key, zmq_msg_data(&part[6]), 32);
        }
    } else if (r == 0 && n >= 2 && zmq_msg_size(&part[1]) <= sizeof(ret->request_id)) {
        ret->request_id_size = zmq_msg_size(&part[1]); /* still answered, with a refusal */
        memcpy(ret->request_id, zmq_msg_data(&part[1]), ret->request_id_size);
    }
    for (int i = 0; i < held; i++)
        zmq_msg_close(&part[i]);
    return r;
}

int zap_request_reply(void *socket, const zap_request *req, const char *status, const char *text, const char *user_id) {
    const char *reply[6] = {"1.0", NULL, status, text, user_id ? user_id : "", ""};
    for (int i = 0; i < 6; i++) {
        int flags = i < 5 ? ZMQ_SNDMORE : 0, sent;
        if (i == 1)
            sent = zmq_send(socket, req->request_id, req->request_id_size, flags);
        else
            sent = zmq_send(socket, reply[i], strlen(reply[i]), flags);
        if (sent < 0)
            return -zmq_errno();
    }
    return 0;
}
