/* Where ddpd listens, when it is a Unix socket (ipc://PATH): ZeroMQ's bind silently takes
 * the path over from a ddpd that is still there, and a path left behind by one that died
 * is in the way. So a live path is refused, a stale one removed, and ours taken back at a
 * clean exit, but only while it is still ours. tcp:// endpoints need none of this. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct {
    bool ipc;
    char path[108];
    dev_t dev; /* the socket file we made, known once bound */
    ino_t ino;
} endpoint_claim;

/* Before bind: whether ep may be taken. -EADDRINUSE when something answers there,
 * -EEXIST when the path is not a socket; err says which. */
int endpoint_claim_prepare(endpoint_claim *c, const char *ep, char *err, size_t err_size);
/* After bind: remembers the file, to give it back. */
void endpoint_claim_bound(endpoint_claim *c);
/* At a clean exit: removes the socket file if it is still the one we made. */
void endpoint_claim_release(endpoint_claim *c);
