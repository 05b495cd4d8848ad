/* The job's key-value store in ddpd, the worker's side (torch.distributed's TCPStore):
 * set a value, or get one, waiting until some rank has set it. A rank hands others what
 * only it can make, such as an NCCL unique id. */
#include <string.h>

#include "common/error.h"
#include "common/limits.h"
#include "worker/libddp/group.h"

static int store_check_key(ddp_group *g, const char *key, const char *what) {
    if (!g)
        return -EINVAL;
    if (g->failed)
        return g->failed;
    size_t n = key ? strnlen(key, DDP_MAX_STORE_KEY + 1) : 0;
    if (n == 0 || n > DDP_MAX_STORE_KEY)
        return group_fail(g, -EINVAL, "%s: a key is 1 to %d bytes of text", what, DDP_MAX_STORE_KEY);
    for (size_t i = 0; i < n; i++)
        if (!wire_printable(key[i]))
            return group_fail(g, -EINVAL, "%s: the key has a byte that is not printable ASCII at %zu", what, i);
    return 0;
}

DDP_EXPORT int ddp_store_set(ddp_group *g, const char *key, const void *value, size_t size) {
    TRY(store_check_key(g, key, "store_set"));
    if (size > DDP_MAX_STORE_VALUE)
        return group_fail(g, -EMSGSIZE, "store_set '%.64s': %zu bytes, more than the %u a value may hold", key, size,
                          (unsigned)DDP_MAX_STORE_VALUE);
    if (size && !value)
        return group_fail(g, -EINVAL, "store_set '%.64s': NULL value", key);
    Ddp__StoreSet body = DDP__STORE_SET__INIT;
    body.key = (char *)key;
    body.value.data = (uint8_t *)value;
    body.value.len = size;
    Ddp__Envelope env;
    group_envelope(g, &env, DDP__MSG_TYPE__STORE_SET);
    env.store_set = &body;
    char timeout_text[160];
    snprintf(timeout_text, sizeof(timeout_text), "store_set '%.64s': ddpd did not answer within %d ms", key,
             g->timeout_ms);
    agent_event *ev = NULL;
    TRY(group_request(g, &env, DDP__MSG_TYPE__STORE_VALUE, g->timeout_ms, timeout_text, &ev));
    agent_event_free(ev);
    if (store_set(&g->store_sets, key, value, size) == 0)
        group_update_rejoin(g);
    return 0;
}

DDP_EXPORT int ddp_store_get(ddp_group *g, const char *key, void *buf, size_t size, size_t *ret_size) {
    TRY(store_check_key(g, key, "store_get"));
    if (size && !buf)
        return group_fail(g, -EINVAL, "store_get '%.64s': NULL buffer", key);
    /* One wait: ddpd answers it with the value as soon as some rank has set the key, or
     * with an error at the group's timeout. */
    char *keys[] = {(char *)key};
    Ddp__StoreWait body = DDP__STORE_WAIT__INIT;
    body.n_keys = 1;
    body.keys = keys;
    body.timeout_ms = (uint32_t)g->timeout_ms;
    Ddp__Envelope env;
    group_envelope(g, &env, DDP__MSG_TYPE__STORE_WAIT);
    env.store_wait = &body;
    char timeout_text[160];
    snprintf(timeout_text, sizeof(timeout_text), "store_get '%.64s': no rank set it within %d ms", key, g->timeout_ms);
    agent_event *ev = NULL;
    /* ddpd's own timeout answers first; ours is the backstop for a silent ddpd. */
    TRY(group_request(g, &env, DDP__MSG_TYPE__STORE_VALUE, g->timeout_ms + 1000, timeout_text, &ev));
    const Ddp__StoreValue *v = ev->msg.env->store_value;
    int r = 0;
    if (!v->found || strcmp(v->key, key) != 0)
        r = group_fail(g, -EPROTO, "store_get '%.64s': ddpd answered for another key or without a value", key);
    else {
        size_t n = v->value.len < size ? v->value.len : size;
        if (n)
            memcpy(buf, v->value.data, n);
        if (ret_size)
            *ret_size = v->value.len;
    }
    agent_event_free(ev);
    return r;
}
