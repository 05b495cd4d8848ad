/* Point-to-point through shared memory: each ordered pair of ranks has a mailbox in the
 * sender's segment (shm_layout.h), a ring of records in send order. A small message goes
 * in its record; a large one sends only its record there and its data over ZeroMQ, so
 * that the receiver still takes messages in the order they were sent. The receiver reads
 * records until one has the tag it asked for, keeping the others for the recvs that will
 * ask for them (matched by source and tag in send order, as over ZeroMQ). A full mailbox
 * holds the sender until the receiver takes something (as ZeroMQ's high-water mark does),
 * within the call's timeout. */
#pragma once
#include "worker/libddp/coll.h"
#include "worker/libddp/shm.h"

typedef struct p2p_shm p2p_shm;

int p2p_shm_open(comm *c, shm_plane *s, p2p_shm **ret);
void p2p_shm_close(p2p_shm *p);
int p2p_shm_send(comm *c, p2p_shm *p, const coll_args *a);
int p2p_shm_recv(comm *c, p2p_shm *p, const coll_args *a);
/* Whether a message from src with tag has come (1) or not yet (0), taking none. */
int p2p_shm_probe(comm *c, p2p_shm *p, int src, int32_t tag);
