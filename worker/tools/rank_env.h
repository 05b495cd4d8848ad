/* The environment each rank of a launch starts with: the caller's, less what the launcher
 * sets, plus the torchrun variables (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
 * MASTER_ADDR, MASTER_PORT), DDP_COORDINATOR, DDP_JOB and the rank's data endpoint. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#include "common/limits.h"

typedef struct {
    char **envp; /* NULL-terminated, for exec */
    char world[32], local_world[32], coordinator[DDP_MAX_ENDPOINT + 32], master_addr[DDP_MAX_ENDPOINT + 32],
        master_port[32], job[DDP_MAX_JOB_NAME + 16], rank[32], local_rank[32], data_endpoint[192];
    const char *socket_dir;
} rank_env;

/* The part every rank shares. job may be NULL (DDP_JOB left as it is); socket_dir is a
 * private directory for the ranks' Unix sockets, or NULL (DDP_DATA_ENDPOINT left as it is). */
int rank_env_build(rank_env *e, int nproc, const char *job, const char *coordinator, const char *socket_dir);
/* Rank i's: its RANK, LOCAL_RANK and data endpoint. */
void rank_env_set_rank(rank_env *e, int i);
void rank_env_free(rank_env *e);
/* Whether the "KEY=VALUE" entry kv is of key. */
bool env_entry_is(const char *kv, const char *key);
