/* What a rank brings back to a ddpd that restarted under its running job: a Join with the
 * job's generation, its rank, the barriers it has completed, the store keys it set and, in
 * ps mode, the step each bucket is at, so that the new ddpd can hold the job again as the
 * members know it. The control thread sends it when ddpd goes away (agent.c), and its
 * pushes that had no average yet after it; the rank keeps it up to date here. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/data_plane.h"
#include "common/limits.h"
#include "worker/libddp/group.h"

/* What the store keys may add to a rejoin: it must stay a control message. */
#define REJOIN_STORE_BYTES (DDP_MAX_ENVELOPE_BYTES / 2)

void group_update_rejoin(ddp_group *g) {
    if (g->world_size < 1)
        return;
    Ddp__StoreSet *entries = calloc(g->store_sets.n_entries ? g->store_sets.n_entries : 1, sizeof(*entries));
    Ddp__StoreSet **list = calloc(g->store_sets.n_entries ? g->store_sets.n_entries : 1, sizeof(*list));
    if (!entries || !list) { /* the rejoin before this one stays */
        free(entries);
        free(list);
        return;
    }
    size_t n = 0, bytes = 0;
    for (size_t i = 0; i < g->store_sets.n_entries; i++) {
        const store_entry *e = &g->store_sets.entries[i];
        bytes += strlen(e->key) + e->size + 16;
        if (bytes > REJOIN_STORE_BYTES) /* the rest is not restored: a get of it waits for a set */
            break;
        ddp__store_set__init(&entries[n]);
        entries[n].key = e->key;
        entries[n].value.data = e->value;
        entries[n].value.len = e->size;
        list[n] = &entries[n];
        n++;
    }
    Ddp__Join body = DDP__JOIN__INIT;
    body.world_size = (uint32_t)g->world_size;
    body.rank = g->rank;
    body.mode = g->mode;
    body.pid = (uint32_t)getpid();
    body.host = g->host;
    body.data_endpoint = g->data_endpoint;
    body.data_key = g->data_key;
    body.data_plane = DDP_DATA_PLANE_VERSION;
    body.generation = g->generation;
    body.barrier_round = g->barrier_round;
    body.store = list;
    body.n_store = n;
    body.ps_buckets = g->ps_buckets; /* ps: the layout, and the step each bucket is at */
    body.n_ps_buckets = g->n_ps_buckets;
    body.ps_steps = g->ps_pull_step; /* the agent raises them to the averages it has had as it sends it */
    body.n_ps_steps = g->ps_pull_step ? g->n_ps_buckets : 0;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__JOIN, g->job, g->rank, g->generation, 0);
    env.join = &body;
    agent_set_rejoin(&g->agent, &env);
    free(entries);
    free(list);
}
