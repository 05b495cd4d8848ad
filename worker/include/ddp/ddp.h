/* libddp: a process group for data-parallel training, what torch.distributed is to Python.
 *
 * Every process calls ddp_init() with the same job name and world size; ddpd (the
 * coordinator) forms the group, assigns ranks and watches every member. Functions that can
 * fail return 0 or a negative errno-style code (ddp_strerror() describes it; for the
 * details, ddp_last_error() says what happened and to whom, e.g. "rank 2 (pid 4242 on
 * lab1) died"). Every call that waits has a timeout; none hangs on a dead peer.
 *
 * A group is used by one thread at a time. */
#ifndef DDP_DDP_H
#define DDP_DDP_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ddp_group ddp_group;

/* Start from DDP_OPTIONS_INIT (or ddp_options_init()): a field left unset is taken from
 * the environment, as torchrun sets it, then from the default. */
typedef struct ddp_options {
    const char *coordinator;   /* ddpd's endpoint; unset: $DDP_COORDINATOR, else
                                  tcp://$MASTER_ADDR:$MASTER_PORT, else tcp://127.0.0.1:29500 */
    const char *job;           /* job name; unset: $DDP_JOB, else "default" */
    int world_size;            /* > 0; unset (0): $WORLD_SIZE, required */
    int rank;                  /* >= 0; unset (-1): $RANK, else ddpd assigns one */
    int local_rank;            /* rank on this host; unset (-1): $LOCAL_RANK, else 0 */
    int timeout_ms;            /* each barrier or collective; unset (0): $DDP_TIMEOUT_MS, else 60000 */
    int join_timeout_ms;       /* until the job forms; unset (0): $DDP_JOIN_TIMEOUT_MS, else 300000 */
    int connect_timeout_ms;    /* until ddpd first answers; unset (0): $DDP_CONNECT_TIMEOUT_MS, else 10000 */
    const char *mode;          /* sync mode every member must agree on; unset: "" */
    const char *data_endpoint; /* where this process listens for peers; unset: $DDP_DATA_ENDPOINT,
                                  else tcp://127.0.0.1:* */
} ddp_options;

#define DDP_OPTIONS_INIT {.rank = -1, .local_rank = -1}
void ddp_options_init(ddp_options *opts);

/* Joins the job and waits until it forms. opts may be NULL: everything from the
 * environment (env://). On failure *ret_group is untouched and the error says why:
 * -EHOSTUNREACH (no coordinator answered), -ECONNREFUSED (rejected: duplicate rank, other
 * world size, protocol version or mode), -ETIMEDOUT (the job did not form in time),
 * -EINVAL (bad options or environment). ddp_last_error(NULL) says which, in words. */
int ddp_init(const ddp_options *opts, ddp_group **ret_group);
/* Leaves the job and frees the group. NULL is a no-op. */
void ddp_finalize(ddp_group *g);

int ddp_rank(const ddp_group *g);
int ddp_world_size(const ddp_group *g);
int ddp_local_rank(const ddp_group *g);

/* Returns once every rank has entered it. -ECONNABORTED when a member died or the job was
 * aborted, -EPIPE when a member left, -ETIMEDOUT after timeout_ms. */
int ddp_barrier(ddp_group *g);

const char *ddp_strerror(int err);
/* What went wrong in the group's last failed call, e.g. "rank 2 (pid 4242 on lab1) died:
 * silent for 1500 ms"; "" when nothing has. With NULL: why this thread's last ddp_init()
 * failed. */
const char *ddp_last_error(const ddp_group *g);

#ifdef __cplusplus
}
#endif
#endif
