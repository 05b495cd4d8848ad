#include "common/store.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/limits.h"

static store_entry *store_find(const store *s, const char *key) {
    uintptr_t at = (uintptr_t)strmap_get(&s->index, key);
    return at ? &s->entries[at - 1] : NULL;
}

const store_entry *store_get(const store *s, const char *key) {
    return store_find(s, key);
}

int store_set(store *s, const char *key, const uint8_t *value, size_t size) {
    size_t key_len = strlen(key);
    if (key_len == 0 || key_len > DDP_MAX_STORE_KEY)
        return -EINVAL;
    if (size > DDP_MAX_STORE_VALUE)
        return -EMSGSIZE;
    store_entry *e = store_find(s, key);
    size_t old = e ? e->size + key_len : 0;
    if (s->bytes - old + key_len + size > DDP_MAX_STORE_BYTES)
        return -ENOSPC;
    if (!e && s->n_entries == DDP_MAX_STORE_KEYS)
        return -ENOSPC;

    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        return -ENOMEM;
    if (size)
        memcpy(copy, value, size);
    if (!e) {
        if (s->n_entries == s->capacity) {
            size_t cap = s->capacity ? 2 * s->capacity : 16;
            store_entry *grown = realloc(s->entries, cap * sizeof(*grown));
            if (!grown) {
                free(copy);
                return -ENOMEM;
            }
            s->entries = grown;
            s->capacity = cap;
        }
        char *k = strdup(key);
        if (!k || strmap_put(&s->index, key, (void *)(uintptr_t)(s->n_entries + 1)) < 0) {
            free(k);
            free(copy);
            return -ENOMEM;
        }
        e = &s->entries[s->n_entries++];
        *e = (store_entry){.key = k};
    }
    free(e->value);
    e->value = copy;
    e->size = size;
    s->bytes = s->bytes - old + key_len + size;
    return 0;
}

void store_clear(store *s) {
    for (size_t i = 0; i < s->n_entries; i++) {
        free(s->entries[i].key);
        free(s->entries[i].value);
    }
    free(s->entries);
    strmap_clear(&s->index);
    *s = (store){0};
}
