/* Who may send to a rank's data socket: the ranks of its job, nobody else.
 *
 * ZeroMQ asks a ZAP handler (RFC 27) in the socket's context at every handshake; the
 * guard is that handler, a thread of the data plane. Over ipc:// the kernel names the
 * connecting process (SO_PEERCRED, in ZeroMQ's peer address): it must be a rank of the
 * job on this host, by pid and user. Over tcp:// the client's CURVE key must be one that a
 * rank advertised at join (ddpd hands every rank's key to all in the Welcome), so a frame
 * between hosts is also encrypted and cannot be altered on the way. An admitted
 * connection carries its rank (ZeroMQ's User-Id), and comm_zmq.c drops any frame whose
 * header names another. A handshake that comes before the Welcome waits for it.
 *
 * The socket's monitor reports every failed handshake, so refusals are counted whatever
 * the cause: a stranger's pid or key, a plain client on a CURVE socket, the wrong server
 * key. */
#pragma once
#include <stddef.h>

#include "worker/libddp/comm.h"

typedef struct data_guard data_guard;

/* Before socket binds: answers its handshakes from now on (waiting until admit). */
int data_guard_start(void *zmq_ctx, void *socket, data_guard **ret);
/* Once the job formed: who may connect. peers must outlive the guard. */
void data_guard_admit(data_guard *g, const comm_peers *peers);
/* Handshakes refused so far, and the last one in words. */
unsigned long long data_guard_refused(data_guard *g, char *last, size_t size);
/* Before the socket is closed: no more of its events (one that comes as the context ends
 * cannot be sent, and libzmq's monitor_event leaks a message it could not send). */
void data_guard_unwatch(data_guard *g);
/* After the socket is closed: ends the thread. */
void data_guard_stop(data_guard *g);
