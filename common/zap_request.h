/* ZeroMQ's ZAP (RFC 27): a handshake's request, read whole from the handler's REP socket
 * on inproc://zeromq.zap.01, and its reply. ddpd's handler maps CURVE keys to users
 * (server/zap.c); each rank's maps the peers of its data socket to ranks
 * (worker/libddp/data_guard.c). */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#include "common/curve_keys.h"

typedef struct {
    char request_id[64]; /* echoed in the reply */
    size_t request_id_size;
    char address[160];       /* the peer's: "HOST:UID:GID:PID" over ipc://, "IP" over tcp:// */
    char mechanism[16];      /* "NULL", "PLAIN" or "CURVE" */
    char key[CURVE_KEY_Z85]; /* CURVE: the client's public key (Z85); "" otherwise */
    bool valid;              /* the frames were a ZAP 1.0 request */
} zap_request;

/* Reads the next request (blocking: poll first). -errno when nothing could be read. */
int zap_request_read(void *socket, zap_request *ret);
/* Answers it: status "200" with user_id (what its messages then carry as User-Id), or
 * "400" with text. */
int zap_request_reply(void *socket, const zap_request *req, const char *status, const char *text, const char *user_id);
