/* A ZeroMQ client socket's failed handshakes, which ZeroMQ otherwise retries in silence:
 * a server that refused this client's CURVE key, or one side speaking CURVE and the other
 * not. A client that hears nothing asks it why before it says "is it running?". */
#pragma once

typedef struct {
    void *watched; /* the socket */
    void *monitor; /* PAIR, connected to the socket's monitor; NULL: none */
    int failed;    /* ZMQ_EVENT_HANDSHAKE_FAILED_*, the telling one (AUTH) kept; 0: none */
} handshake_watch;

typedef enum {
    HANDSHAKE_OK = 0,            /* none failed (so far) */
    HANDSHAKE_KEY_REFUSED,       /* the server's ZAP refused this client's key */
    HANDSHAKE_MECHANISM_DIFFERS, /* one side speaks CURVE and the other not (or the server key is wrong) */
} handshake_outcome;

/* Starts watching sock (before it connects). 0, or a negative errno. */
int handshake_watch_start(handshake_watch *w, void *zmq_ctx, void *sock);
/* Takes in the failures seen so far and says what they amount to. */
handshake_outcome handshake_watch_read(handshake_watch *w);
/* Before the socket is closed: an event of its closing, sent as its context ends, fails,
 * and libzmq leaks the event's frame (its monitor_event does not close a message it could
 * not send). */
void handshake_watch_stop(handshake_watch *w);
