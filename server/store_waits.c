#include "server/store_waits.h"

#include <errno.h>
#include <stdlib.h>

#include "common/limits.h"

/* The waits that miss one key; a wait that names it twice is there twice. */
typedef struct {
    store_waiter **items;
    size_t n, capacity;
} waiter_list;

static int list_append(store_waits *ws, const char *key, store_waiter *w) {
    waiter_list *l = strmap_get(&ws->by_key, key);
    if (!l) {
        if (!(l = calloc(1, sizeof(*l))))
            return -ENOMEM;
        if (strmap_put(&ws->by_key, key, l) < 0) {
            free(l);
            return -ENOMEM;
        }
    }
    if (l->n == l->capacity) {
        size_t cap = l->capacity ? 2 * l->capacity : 4;
        store_waiter **grown = realloc(l->items, cap * sizeof(*grown));
        if (!grown)
            return -ENOMEM;
        l->items = grown;
        l->capacity = cap;
    }
    l->items[l->n++] = w;
    return 0;
}

/* Takes one of w's places off key's list, and the list off the index once empty. */
static void list_drop(store_waits *ws, const char *key, store_waiter *w) {
    waiter_list *l = strmap_get(&ws->by_key, key);
    for (size_t i = 0; l && i < l->n; i++)
        if (l->items[i] == w) {
            l->items[i] = l->items[--l->n];
            break;
        }
    if (l && l->n == 0) {
        strmap_remove(&ws->by_key, key);
        free(l->items);
        free(l);
    }
}

static void unlink_waiter(store_waits *ws, store_waiter *w) {
    if (w->prev)
        w->prev->next = w->next;
    else
        ws->head = w->next;
    if (w->next)
        w->next->prev = w->prev;
    else
        ws->tail = w->prev;
    w->prev = w->next = NULL;
    ws->n--;
}

int store_waits_add(store_waits *ws, const store *st, store_waiter *w, bool *ret_ready) {
    *ret_ready = false;
    if (ws->n >= DDP_MAX_STORE_WAITERS)
        return -ENOSPC;
    w->missing = 0;
    for (size_t k = 0; k < w->n_keys; k++) {
        if (store_get(st, w->keys[k]))
            continue;
        if (list_append(ws, w->keys[k], w) < 0) {
            while (k-- > 0) /* back out: the waiter stays the caller's */
                if (!store_get(st, w->keys[k]))
                    list_drop(ws, w->keys[k], w);
            return -ENOMEM;
        }
        w->missing++;
    }
    if (w->missing == 0) {
        *ret_ready = true;
        return 0;
    }
    w->prev = ws->tail;
    w->next = NULL;
    if (ws->tail)
        ws->tail->next = w;
    else
        ws->head = w;
    ws->tail = w;
    ws->n++;
    return 0;
}

store_waiter *store_waits_key_set(store_waits *ws, const char *key) {
    waiter_list *l = strmap_remove(&ws->by_key, key);
    if (!l)
        return NULL;
    store_waiter *ready = NULL, **tail = &ready;
    for (size_t i = 0; i < l->n; i++) {
        store_waiter *w = l->items[i];
        /* a wait listed twice here reaches 0 at its last place: none after it refers to it */
        if (--w->missing == 0) {
            unlink_waiter(ws, w);
            *tail = w;
            tail = &w->next;
        }
    }
    free(l->items);
    free(l);
    return ready;
}

void store_waits_remove(store_waits *ws, const store *st, store_waiter *w) {
    for (size_t k = 0; k < w->n_keys; k++)
        if (!store_get(st, w->keys[k])) /* a key set since left its list whole */
            list_drop(ws, w->keys[k], w);
    unlink_waiter(ws, w);
}

void store_waiter_free(store_waiter *w) {
    if (!w)
        return;
    for (size_t k = 0; k < w->n_keys; k++)
        free(w->keys[k]);
    free(w->keys);
    free(w);
}

static void free_list(const char *key, void *value, void *ctx) {
    (void)key;
    (void)ctx;
    waiter_list *l = value;
    free(l->items);
    free(l);
}

void store_waits_clear(store_waits *ws) {
    strmap_each(&ws->by_key, free_list, NULL);
    strmap_clear(&ws->by_key);
    for (store_waiter *w = ws->head, *next; w; w = next) {
        next = w->next;
        store_waiter_free(w);
    }
    *ws = (store_waits){0};
}
