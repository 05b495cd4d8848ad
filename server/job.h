/* A job: the members that joined under one name, its ranks, barrier and store.
 *
 * A job is forming until world_size members have joined; then ranks are assigned
 * (requested ranks honoured, the rest in join order) and it runs until every member has
 * left or one dies. This file is the bookkeeping only; server.c does the talking. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/curve_keys.h"
#include "common/limits.h"
#include "common/store.h"
#include "common/wire.h"
#include "server/ps.h"
#include "server/ps_shm.h"
#include "server/store_waits.h"

typedef enum { JOB_FORMING, JOB_RUNNING } job_state;

typedef struct {
    uint8_t identity[WIRE_MAX_IDENTITY]; /* the ROUTER routing id of its connection */
    size_t identity_size;
    int32_t requested_rank; /* -1: any */
    int32_t rank;           /* assigned when the job forms; requested_rank until then */
    uint32_t pid;
    char host[DDP_MAX_HOST + 1];
    char endpoint[DDP_MAX_ENDPOINT + 1];
    char data_key[CURVE_KEY_Z85]; /* its data socket's CURVE public key, for the peers ("": not tcp://) */
    uint64_t join_seq;            /* echoed in the Welcome */
    uint32_t local_pid;           /* the kernel's pid of its connection when on this host (ipc://), else 0 */
    char stalled[32];          /* silent past the liveness window, its process still here: its state ("T: stopped") */
    uint64_t gone_seen_ms;     /* when a check first found its process gone (0: not yet): death is confirmed later */
    size_t unread_reply_bytes; /* a reply to it went past its reply budget with this much unread: it is ended */
    uint64_t *ps_steps;        /* a rejoin's: the step of each ps bucket, until the job has recovered */
    uint64_t last_heard_ms;
    bool left;
    bool at_barrier;
    bool barrier_owed;    /* back a round behind the job after ddpd restarted: that round's barrier completed */
    uint64_t barrier_seq; /* echoed when the barrier completes */
    /* progress, as of its last heartbeat */
    uint64_t step;
    double samples_per_s;
    bool waiting;
    int32_t waiting_on;
    uint64_t waiting_since_ms; /* ddpd's clock */
    char waiting_in[64];
} job_member;

typedef struct {
    char name[DDP_MAX_JOB_NAME + 1];
    int64_t owner; /* the uid of the user whose member formed it; -1: unknown (a TCP client) */
    char mode[DDP_MAX_MODE + 1];
    job_state state;
    uint32_t world_size;
    uint32_t data_plane; /* its first member's libddp data plane version (common/data_plane.h) */
    uint64_t generation; /* set when it forms */
    /* Rejoined after ddpd restarted: running, until every rank is back or the deadline */
    bool recovering;
    size_t n_left;                /* running members that said they leave (job_member.left) */
    uint64_t recover_deadline_ms; /* and, once back, for a ps average to be given back */
    uint64_t created_ms;
    uint64_t progress_logged_ms;
    job_member *members; /* join order while forming, rank order once running */
    size_t n_members, capacity;
    uint64_t barrier_round;
    uint32_t barrier_arrived;
    bool rounds_split; /* a rank came back a round behind the others: barrier_round is the highest there is */
    store store;
    store_waits waits;   /* members blocked in a store wait */
    uint64_t *ps_layout; /* ps mode: elements per gradient bucket, as the members declared */
    size_t n_ps_layout;
    ps_state ps; /* set up when the job forms */
    ps_shm shm;  /* ps mode: the ranks' push segments and the average segment, on this host */
} job;

job *job_new(const char *name, const char *mode, uint32_t world_size, const uint64_t *ps_layout, size_t n_ps_layout,
             uint64_t now_ms);
void job_free(job *j);

/* Checks that a join fits this forming job: same world size and mode, rank free.
 * Returns 0 or a negative error with reason filled. */
int job_check_join(const job *j, uint32_t world_size, const char *mode, int32_t rank, const uint64_t *ps_layout,
                   size_t n_ps_layout, char *reason, size_t reason_size);
/* Checks that a rejoin (a member of a running job, back after ddpd restarted) fits this
 * recovering job: the same generation, world size and mode, its rank not back yet. */
int job_check_rejoin(const job *j, uint64_t generation, uint32_t world_size, const char *mode, int32_t rank,
                     const uint64_t *ps_layout, size_t n_ps_layout, char *reason, size_t reason_size);
/* Makes a new job (its first member rejoining) the running job it was: generation, barriers
 * done, and in ps mode its buckets at the steps the member is at. */
int job_recover(job *j, uint64_t generation, uint64_t barrier_round, const uint64_t *ps_steps, size_t n_ps_steps);
/* Once every rank is back: where each ps bucket is, the furthest step a rank says (the one
 * after the last average it has, in its hands or in the old ddpd's segment). A rank a step
 * behind lost an average with the ddpd that went away (sent to the others, not to it): it is
 * marked to have it given back by the lowest rank ahead (ps_mark_behind). Further behind
 * cannot be (no average comes before every rank pushed): -ESTALE with reason. */
int job_ps_resolve(job *j, char *reason, size_t reason_size);
/* Every rank is back: members in rank order again, the job no longer recovering. */
void job_recovered(job *j);
int job_add_member(job *j, const job_member *m);
void job_remove_member(job *j, size_t index);
/* The member index for a connection, or -1. */
ssize_t job_find_member(const job *j, const uint8_t *identity, size_t identity_size);

bool job_complete(const job *j);
/* Assigns ranks (requested ones kept, the rest the lowest free ranks in join order),
 * orders members by rank, sets up the ps reduction and marks the job running. */
int job_form(job *j, uint64_t generation);
/* The ranks still missing while forming, as "{2, 3}". */
void job_missing_ranks(const job *j, char *buf, size_t size);
/* Members that have not left. */
size_t job_active_members(const job *j);
