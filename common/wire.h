/* Framing of control messages: [envelope][payload frames...] over ZeroMQ.
 *
 * The envelope is a protobuf-c Ddp__Envelope (proto/ddp.proto). wire_recv() checks the
 * frame count and sizes before anything is unpacked, then validates every field a peer
 * controls against common/limits.h, so that code past it may trust the message. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#include "common/limits.h"
#include "proto/ddp.pb-c.h"

#define WIRE_MAX_IDENTITY 255 /* ZeroMQ routing ids are at most 255 bytes */

typedef struct {
    const void *data;
    size_t size;
} wire_frame;

typedef struct {
    uint8_t identity[WIRE_MAX_IDENTITY]; /* the sender, on a ROUTER socket */
    size_t identity_size;
    /* On a ROUTER socket, ZeroMQ's Peer-Address of the connection: over ipc:// the kernel's
     * credentials of the peer as "...:UID:GID:PID" (SO_PEERCRED, taken at connect; see
     * wire_peer_credentials), over TCP its address; "" when ZeroMQ gives none. */
    char peer[96];
    char user[64];      /* ZeroMQ's User-Id of the connection: the user a ZAP handler named ("" for none) */
    Ddp__Envelope *env; /* NULL when the envelope could not be decoded */
    zmq_msg_t payload[DDP_MAX_PAYLOAD_FRAMES];
    size_t n_payload;
    char error[160]; /* what was wrong, when wire_recv failed */
} wire_msg;

/* Sets ZMQ_LINGER to 0 and ZMQ_MAXMSGSIZE to max_msg_bytes. */
int wire_socket_setup(void *socket, int64_t max_msg_bytes);

/* Fills the header of env: version, type and the matching body case, job, rank, generation
 * and seq. The caller points the body member (env->join, ...) at its message. */
void wire_envelope_init(Ddp__Envelope *env, Ddp__MsgType type, const char *job, int32_t rank, uint64_t generation,
                        uint64_t seq);

/* Packs env into a new ZeroMQ frame. -EMSGSIZE beyond DDP_MAX_ENVELOPE_BYTES. */
int wire_pack(const Ddp__Envelope *env, zmq_msg_t *ret_frame);

/* Sends [identity][envelope][payload...]; identity is NULL on a DEALER. Never blocks:
 * -EAGAIN when the peer's queue is full, -EHOSTUNREACH for an unknown ROUTER peer. */
int wire_send(void *socket, const uint8_t *identity, size_t identity_size, const Ddp__Envelope *env,
              const wire_frame *payload, size_t n_payload);

/* Makes the ZeroMQ message of one frame of size bytes, for the sender to fill: wire_send's
 * is zmq_msg_init_size; ddpd's charges it to the connection it goes to until ZeroMQ lets
 * it go (server/reply_budget.h). 0 or a negative errno. */
typedef struct {
    int (*init)(void *ctx, zmq_msg_t *msg, size_t size);
    void *ctx;
} wire_frame_maker;

/* The bytes wire_send would queue: the packed envelope and the payload. */
size_t wire_message_bytes(const Ddp__Envelope *env, const wire_frame *payload, size_t n_payload);
/* wire_send with the frames made by maker. Every frame is made before the first goes out,
 * so that a failure never leaves half a message on the socket. */
int wire_send_made(void *socket, const uint8_t *identity, size_t identity_size, const Ddp__Envelope *env,
                   const wire_frame *payload, size_t n_payload, const wire_frame_maker *maker);

/* Receives one message. With router, the first frame is the sender's identity.
 * Returns 0, -EAGAIN (nothing to read with ZMQ_DONTWAIT), or a negative error with
 * msg->error saying what was wrong: -EMSGSIZE (too many or too large frames), -EBADMSG
 * (undecodable), -EPROTONOSUPPORT (other version) or -EPROTO (invalid field); after the
 * last two msg->env is still set so the caller can answer. Always wire_msg_close() it. */
int wire_recv(void *socket, bool router, int flags, wire_msg *msg);
void wire_msg_close(wire_msg *msg);

/* The kernel's uid and pid of the peer that sent msg over an ipc:// connection (parsed
 * from msg->peer); -ENOENT when there are none (TCP, inproc). Only for a socket bound to
 * ipc://: a TCP peer's IPv6 address has colons too. */
int wire_peer_credentials(const wire_msg *msg, uint32_t *ret_uid, uint32_t *ret_pid);
/* The same from a Peer-Address (or a ZAP request's address) itself. */
int wire_address_credentials(const char *address, uint32_t *ret_uid, uint32_t *ret_pid);
/* Whether a TCP peer (msg->peer), or an address or host, is this host's loopback: a
 * process on this host, as far as the network can tell. */
bool wire_peer_loopback(const wire_msg *msg);
bool wire_address_loopback(const char *address);

/* Validates a decoded envelope carrying n_payload payload frames. Fills err on failure. */
int wire_validate(const Ddp__Envelope *env, size_t n_payload, char *err, size_t err_size);

/* The message type's name, "join", ... or "unknown". */
const char *wire_type_name(int type);

/* Printable ASCII, what every text field on the wire is made of (hosts, endpoints, keys,
 * reasons). */
static inline bool wire_printable(char c) {
    return (unsigned char)c >= 0x20 && (unsigned char)c <= 0x7e;
}

/* Whether ep is an endpoint ddpd can listen on or be reached at: tcp://HOST:PORT (PORT
 * 1..65535, or * where listening says so), tcp://[IPV6]:PORT, or ipc://PATH (PATH fits a
 * Unix socket's). ZeroMQ takes some of what is refused here (a port of 99999 wraps round);
 * err says what is wrong, naming what. */
int wire_endpoint_check(const char *ep, bool wildcard_port, char *err, size_t err_size);

/* A job or mode name: 1..max bytes of [A-Za-z0-9._-]. */
bool wire_name_valid(const char *s, size_t max);
