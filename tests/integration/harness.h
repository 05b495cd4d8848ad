/* Real processes on loopback for the integration tests: start ddpd and members, wait for
 * what they print (never sleep), and speak the wire protocol directly when a test must
 * play a misbehaving or hand-made peer. Every wait has a timeout. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "common/wire.h"

typedef struct {
    pid_t pid;
    int out;   /* its stdout and stderr, together */
    char *buf; /* everything it printed so far */
    size_t len, cap;
    size_t cursor; /* proc_expect searches after this */
    bool eof;
    int status; /* exit code, 128+signal when killed; valid once reaped */
    bool reaped;
} proc;

/* Starts argv[0] with the test's environment, less the rendezvous variables, plus env
 * ("KEY=VALUE" strings, NULL-terminated, may be NULL), which win over inherited ones. */
void proc_start(proc *p, const char *const *argv, const char *const *env);
/* Waits up to timeout_ms for a line containing needle after the last match; copies that
 * line to line (when not NULL). False on timeout or end of output. */
bool proc_expect(proc *p, const char *needle, int timeout_ms, char *line, size_t size);
/* Waits up to timeout_ms for the process to exit; returns its code (128+signal when
 * killed by one), or -1 after killing it on timeout. */
int proc_wait(proc *p, int timeout_ms);
void proc_signal(proc *p, int sig);
/* Kills it if still running and frees its buffer. */
void proc_close(proc *p);
/* What it printed, for failure messages. */
const char *proc_output(proc *p);
/* The last 3000 bytes of it: Check's messages have a length limit (a longer one ends the
 * test with "Message string too long" and loses the message), and the end says what went wrong. */
const char *proc_output_tail(proc *p);

typedef struct {
    proc p;
    char endpoint[DDP_MAX_ENDPOINT + 1];
    char port[16];
} ddpd_proc;

/* Starts ddpd on a free loopback port with extra flags; returns once it listens. */
void ddpd_start(ddpd_proc *d, const char *const *extra_args);
/* SIGTERM, and expects a clean exit. Returns the exit code. */
int ddpd_stop(ddpd_proc *d);

/* Starts argv as rank (-1: any) of a job of world_size on d, the rendezvous in its
 * environment as a launcher would set it. */
void rank_start(proc *p, const ddpd_proc *d, int world_size, int rank, const char *job, const char *const *argv);
/* Starts a member (tests/integration/member.c) of a job on d. */
void member_start(proc *p, const ddpd_proc *d, int world_size, int rank, const char *job, const char *const *args);

/* Writes dir/SPLIT-images-idx3-ubyte.gz and dir/SPLIT-labels-idx1-ubyte.gz: n side x side
 * images whose class shows in them (a bright column per class, plus noise), so a model can
 * learn them. */
void idx_write_split(const char *dir, const char *split, int n, int side, unsigned seed);

/* A hand-made peer: a DEALER on the control endpoint. */
void *raw_connect(void *zmq_ctx, const char *endpoint);
/* Sends env and waits up to timeout_ms for a message (the first one not a heartbeat).
 * Returns wire_recv's result; msg must be closed. */
int raw_request(void *socket, const Ddp__Envelope *env, int timeout_ms, wire_msg *msg);
/* Waits until ddpd's status shows job with at least n members (a hand-made peer's Join
 * has landed), asking again and again; fails the test after timeout_ms. */
void raw_wait_members(void *zmq_ctx, const char *endpoint, const char *job, size_t n, int timeout_ms);
/* Waits for the next message that is not a heartbeat. */
int raw_next(void *socket, int timeout_ms, wire_msg *msg);
/* A hand-made peer that sends the Join of rank of a 2-rank ps job with buckets layout[0..n)
 * as process pid (host "test"); the Welcome is the caller's to read. */
void *raw_ps_join(void *zmq_ctx, const char *endpoint, const char *job, int rank, const uint64_t *layout, size_t n,
                  uint32_t pid);
