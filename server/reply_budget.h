/* What ddpd's replies to each connection hold in memory until ZeroMQ has written them out.
 *
 * ZeroMQ queues what it cannot yet write to a peer up to SNDHWM messages, whatever their
 * size: a client that asks for a 1 MiB store value a thousand times and never reads would
 * make ddpd hold a gigabyte. So every reply's frames are charged to the connection they go
 * to until ZeroMQ lets them go (its I/O thread frees them once written to the kernel), and
 * a reply that would take a connection past its limit is not sent: what Redis does with
 * client-output-buffer-limit. ddpd then ends the member (server.c); a legitimate member
 * never gets near, as its own ZeroMQ reads everything ddpd sends as it comes.
 *
 * Heartbeats are not charged: one shared frame a tick, a few bytes per rank, bounded by
 * SNDHWM. */
#pragma once
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/strmap.h"
#include "common/wire.h"

/* The limit of a connection: this, raised for a ps member by a round of its job's averages
 * (for any reply, while it holds anything). */
#define REPLY_BUDGET_BYTES (64u << 20)
/* All connections together (a quarter of the unit's MemoryMax=8G): past it, a connection
 * that already holds replies gets no more, so that many connections that do not read
 * cannot add up to what one may not; one that holds none still gets its reply. */
#define REPLY_BUDGET_TOTAL_BYTES (2ull << 30)

/* The user of a connection no message has named yet. */
#define REPLY_USER_UNKNOWN "?"
/* How long a connection that holds nothing is remembered, with its user, after its last
 * message. */
#define REPLY_NOTE_KEEP_MS 60000

typedef struct {
    strmap by_identity;  /* hex routing id -> reply_budget (reply_budget.c) */
    strmap by_user;      /* user (reply_budgets_note_user) -> what its connections hold */
    atomic_size_t total; /* bytes queued over every connection */
    size_t connection_bytes, total_bytes;
} reply_budgets;

/* An empty set of budgets with these limits (ddpd: REPLY_BUDGET_BYTES and _TOTAL_BYTES). */
void reply_budgets_init(reply_budgets *b, size_t connection_bytes, size_t total_bytes);
/* A message came from identity, sent by user (a name for who ddpd takes the sender to be:
 * "uid 1000", "curve alice", "tcp") at now_ms: its replies are charged to that user too. */
int reply_budgets_note_user(reply_budgets *b, const uint8_t *identity, size_t identity_size, const char *user,
                            uint64_t now_ms);
/* Sends as wire_send does, charging the frames to identity's connection, whose limit is
 * raised by extra bytes (at least; while it holds anything). -ENOBUFS, nothing sent, when
 * the message would take the connection past its limit, or all of them past the total
 * while it holds some and its user holds an equal share of the total among the users that
 * hold any: *ret_queued says what the connection holds already. */
int reply_budgets_send(reply_budgets *b, void *router, const uint8_t *identity, size_t identity_size,
                       const Ddp__Envelope *env, const wire_frame *payload, size_t n_payload, size_t extra,
                       size_t *ret_queued);
/* The bytes of replies to identity that ZeroMQ still holds. */
size_t reply_budgets_queued(const reply_budgets *b, const uint8_t *identity, size_t identity_size);
/* Forgets the connections that hold nothing and have been silent REPLY_NOTE_KEEP_MS, and
 * the users none of whose connections are left (at ddpd's tick: the maps stay as small as
 * the connections live or with replies on their way). */
void reply_budgets_sweep(reply_budgets *b, uint64_t now_ms);
/* After the ZeroMQ context has ended (every frame let go). */
void reply_budgets_free(reply_budgets *b);
