/* ddpd's ZAP handler (ZeroMQ's RFC 27) for CURVE over TCP: a thread answering on
 * inproc://zeromq.zap.01 in ddpd's context. A client whose public key the users file
 * names passes as that user (messages then carry it as User-Id); any other key is refused
 * before a single message of it reaches ddpd.
 *
 * The users file: one "USER PUBLIC-KEY" per line (Z85), # comments; every USER a user of
 * this host. */
#pragma once
#include <stddef.h>
#include <sys/types.h>

typedef struct zap zap;

int zap_start(void *zmq_ctx, const char *users_path, zap **ret, char *err, size_t err_size);
void zap_stop(zap *z);
/* The uid of a user the users file names (a message's User-Id), found at start-up;
 * -ENOENT for any other. */
int zap_user_uid(const zap *z, const char *user, uid_t *ret_uid);
