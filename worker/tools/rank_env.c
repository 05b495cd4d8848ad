#include "worker/tools/rank_env.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

extern char **environ;

bool env_entry_is(const char *kv, const char *key) {
    size_t n = strlen(key);
    return strncmp(kv, key, n) == 0 && kv[n] == '=';
}

/* A TCP port on loopback that nothing listens on now, for torch's own store (rank 0
 * serves it on MASTER_PORT): ddpd's port, bound already, is never the one. 0 on failure. */
static int free_loopback_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(addr);
    int port = 0;
    if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0 && getsockname(fd, (struct sockaddr *)&addr, &len) == 0)
        port = ntohs(addr.sin_port);
    close(fd);
    return port;
}

/* The last slots are left for RANK, LOCAL_RANK and the data endpoint, filled per rank. */
int rank_env_build(rank_env *e, int nproc, const char *job, const char *coordinator, const char *socket_dir) {
    static const char *const ours[] = {"RANK",        "LOCAL_RANK",  "WORLD_SIZE",      "LOCAL_WORLD_SIZE",
                                       "MASTER_ADDR", "MASTER_PORT", "DDP_COORDINATOR", "JOURNAL_STREAM"};
    size_t n_environ = 0;
    while (environ[n_environ])
        n_environ++;
    e->envp = calloc(n_environ + 16, sizeof(char *));
    if (!e->envp)
        return -ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n_environ; i++) {
        bool drop = job && env_entry_is(environ[i], "DDP_JOB");
        for (size_t d = 0; d < sizeof(ours) / sizeof(ours[0]) && !drop; d++)
            drop = env_entry_is(environ[i], ours[d]);
        if (!drop)
            e->envp[k++] = environ[i];
    }
    snprintf(e->world, sizeof(e->world), "WORLD_SIZE=%d", nproc);
    snprintf(e->local_world, sizeof(e->local_world), "LOCAL_WORLD_SIZE=%d", nproc);
    snprintf(e->coordinator, sizeof(e->coordinator), "DDP_COORDINATOR=%s", coordinator);
    e->envp[k++] = e->world;
    e->envp[k++] = e->local_world;
    e->envp[k++] = e->coordinator;
    /* libddp reads DDP_COORDINATOR; the torchrun pair is for torch's own store (env://),
     * which must not be ddpd's port: every rank is on this host, rank 0 serves it. */
    int port = free_loopback_port();
    if (port > 0) {
        snprintf(e->master_addr, sizeof(e->master_addr), "MASTER_ADDR=127.0.0.1");
        snprintf(e->master_port, sizeof(e->master_port), "MASTER_PORT=%d", port);
        e->envp[k++] = e->master_addr;
        e->envp[k++] = e->master_port;
    }
    if (job) {
        snprintf(e->job, sizeof(e->job), "DDP_JOB=%s", job);
        e->envp[k++] = e->job;
    }
    e->socket_dir = socket_dir;
    e->envp[k] = e->rank;
    e->envp[k + 1] = e->local_rank;
    /* Every rank is on this host: their data planes meet over Unix sockets, which carry
     * large tensors faster than loopback TCP (as NCCL prefers shared memory on one node).
     * A DDP_DATA_ENDPOINT the user set wins. */
    e->envp[k + 2] = socket_dir ? e->data_endpoint : NULL;
    e->envp[k + 3] = NULL;
    return 0;
}

void rank_env_set_rank(rank_env *e, int i) {
    snprintf(e->rank, sizeof(e->rank), "RANK=%d", i);
    snprintf(e->local_rank, sizeof(e->local_rank), "LOCAL_RANK=%d", i);
    if (e->socket_dir)
        snprintf(e->data_endpoint, sizeof(e->data_endpoint), "DDP_DATA_ENDPOINT=ipc://%s/rank-%d", e->socket_dir, i);
}

void rank_env_free(rank_env *e) {
    free(e->envp);
    e->envp = NULL;
}
