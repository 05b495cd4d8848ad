#include "server/user_directory.h"

#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/strmap.h"
#include "server/helper_thread.h"

#define DIRECTORY_MAX_ENTRIES 4096      /* past it, the half used longest ago is forgotten */
#define DIRECTORY_MAX_QUEUED 256        /* questions waiting for NSS: past it, asked later */
#define DIRECTORY_WAIT_WINDOW_MS 1000   /* the loop waits at most wait_ms in each */
#define DIRECTORY_MISS_TTL_MS 5000      /* "no such user" and failures: asked again sooner */
#define DIRECTORY_MAX_BUFFER (16 << 20) /* NSS's record of a group of many members */
#define DIRECTORY_MAX_NAME 256          /* LOGIN_NAME_MAX */

typedef enum { ASK_UID, ASK_NAME, ASK_IN_GROUP } question;

typedef struct entry {
    char key[DIRECTORY_MAX_NAME + 32];
    question q;
    char name[DIRECTORY_MAX_NAME]; /* ASK_UID: the user's; ASK_IN_GROUP: the group's */
    uid_t uid;                     /* ASK_NAME, ASK_IN_GROUP: the user's */
    /* the answer, once there is one (perhaps an old one while it is asked again) */
    bool answered, asking; /* asking: queued, or being asked */
    int result;
    uid_t found_uid;
    char found_name[DIRECTORY_MAX_NAME];
    uint64_t expires_ms, used_ms;
    struct entry *next; /* in the queue */
} entry;

struct user_directory {
    pthread_mutex_t lock;
    pthread_cond_t work, answered; /* answered: on the monotonic clock */
    pthread_t thread;
    bool stopping, busy; /* busy: the thread is asking NSS */
    bool orphaned;       /* closed while busy: the thread frees it when NSS answers */
    strmap entries;      /* by key */
    entry *head, *tail;  /* to ask, in order */
    size_t queued;
    int wait_ms, ttl_ms;
    uint64_t window_ms, waited_ms; /* the loop's waits: in the window that began at window_ms */
    unsigned long lookups;
    log_ratelimit failures; /* the thread's own */
};

/* ---- asking NSS (on the directory's thread) ------------------------------------------- */

/* ENOENT and the others that getpw*_r(3) names for "not found"; a failure otherwise (NSS's
 * own timeout too, which is not this directory's "no answer yet"). */
static int not_found(int r) {
    if (r == 0 || r == ENOENT || r == ESRCH || r == EBADF || r == EPERM)
        return -ENOENT;
    return r == ETIMEDOUT ? -EIO : -r;
}

/* The user of uid or of name (name NULL): its name, uid and primary group. */
static int find_user(uid_t uid, const char *name, char *ret_name, uid_t *ret_uid, gid_t *ret_gid) {
    for (size_t size = 1024;; size *= 4) {
        char *buf = malloc(size);
        if (!buf)
            return -ENOMEM;
        struct passwd pw, *found = NULL;
        int r = name ? getpwnam_r(name, &pw, buf, size, &found) : getpwuid_r(uid, &pw, buf, size, &found);
        if (r == 0 && found) {
            snprintf(ret_name, DIRECTORY_MAX_NAME, "%s", pw.pw_name);
            *ret_uid = pw.pw_uid;
            *ret_gid = pw.pw_gid;
        }
        free(buf);
        if (r != ERANGE || size >= DIRECTORY_MAX_BUFFER)
            return r == 0 && found ? 0 : not_found(r);
    }
}

/* Whether the user user_name (primary group gid) belongs to the group of name. */
static int in_group(const char *group, const char *user_name, gid_t gid) {
    for (size_t size = 4096;; size *= 4) {
        char *buf = malloc(size);
        if (!buf)
            return -ENOMEM;
        struct group gr, *found = NULL;
        int r = getgrnam_r(group, &gr, buf, size, &found), member = 0;
        if (r == 0 && found) {
            member = gr.gr_gid == gid;
            for (char **m = gr.gr_mem; !member && *m; m++)
                member = strcmp(*m, user_name) == 0;
        }
        free(buf);
        if (r != ERANGE || size >= DIRECTORY_MAX_BUFFER)
            return r == 0 ? member : not_found(r) == -ENOENT ? 0 : not_found(r);
    }
}

static void ask(entry *e) {
    gid_t gid;
    switch (e->q) {
    case ASK_UID:
        e->result = find_user(0, e->name, e->found_name, &e->found_uid, &gid);
        break;
    case ASK_NAME:
        e->result = find_user(e->uid, NULL, e->found_name, &e->found_uid, &gid);
        break;
    case ASK_IN_GROUP:
        e->result = find_user(e->uid, NULL, e->found_name, &e->found_uid, &gid);
        if (e->result == 0)
            e->result = in_group(e->name, e->found_name, gid);
        else if (e->result == -ENOENT) /* a uid no user has: in no group */
            e->result = 0;
        break;
    }
}

static void free_entry(const char *key, void *value, void *ctx) {
    (void)key, (void)ctx;
    free(value);
}

static void directory_free(user_directory *d) {
    strmap_each(&d->entries, free_entry, NULL);
    strmap_clear(&d->entries);
    pthread_cond_destroy(&d->answered);
    pthread_cond_destroy(&d->work);
    pthread_mutex_destroy(&d->lock);
    free(d);
}

static void *directory_main(void *arg) {
    user_directory *d = arg;
    pthread_mutex_lock(&d->lock);
    while (!d->stopping) {
        if (!d->head) {
            pthread_cond_wait(&d->work, &d->lock);
            continue;
        }
        entry *e = d->head, asked = *e; /* asked without the lock: the entry stays (asking) */
        d->head = e->next;
        if (!d->head)
            d->tail = NULL;
        d->queued--;
        d->busy = true;
        pthread_mutex_unlock(&d->lock);
        ask(&asked);
        if (asked.result < 0 && asked.result != -ENOENT) /* the key is a name or a uid: no secret */
            log_ratelimited(&d->failures, LOG_LEVEL_WARN, "user directory: %s: NSS failed: %s", asked.key,
                            error_string(asked.result));
        pthread_mutex_lock(&d->lock);
        if (d->orphaned) {
            pthread_mutex_unlock(&d->lock);
            directory_free(d);
            return NULL;
        }
        d->busy = false;
        d->lookups++;
        bool failed = asked.result < 0 && asked.result != -ENOENT;
        if (!failed || !e->answered) { /* a failed refresh keeps the answer it had */
            e->result = asked.result;
            e->found_uid = asked.found_uid;
            memcpy(e->found_name, asked.found_name, sizeof(e->found_name));
        }
        e->answered = true;
        e->asking = false;
        e->expires_ms = clock_now_ms() + (asked.result < 0 ? DIRECTORY_MISS_TTL_MS : (uint64_t)d->ttl_ms);
        pthread_cond_broadcast(&d->answered);
    }
    pthread_mutex_unlock(&d->lock);
    return NULL;
}

/* ---- the loop's side ------------------------------------------------------------------ */

int user_directory_open(user_directory **ret, int wait_ms, int ttl_ms) {
    user_directory *d = calloc(1, sizeof(*d));
    if (!d)
        return -ENOMEM;
    d->wait_ms = wait_ms;
    d->ttl_ms = ttl_ms;
    d->failures = (log_ratelimit)LOG_RATELIMIT_INIT(10000, 5);
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->work, NULL);
    helper_cond_init(&d->answered);
    int r = helper_thread_start(&d->thread, directory_main, d);
    if (r < 0) {
        directory_free(d);
        return r;
    }
    *ret = d;
    return 0;
}

void user_directory_close(user_directory *d) {
    if (!d)
        return;
    pthread_mutex_lock(&d->lock);
    d->stopping = true;
    d->orphaned = d->busy; /* a lookup that hangs in NSS must not hold ddpd's exit */
    bool orphaned = d->orphaned;
    pthread_t thread = d->thread; /* an orphaned d may be gone once unlocked */
    pthread_cond_signal(&d->work);
    pthread_mutex_unlock(&d->lock);
    if (orphaned) {
        pthread_detach(thread);
        return;
    }
    pthread_join(d->thread, NULL);
    directory_free(d);
}

typedef struct {
    entry **unused;
    size_t n;
} unused_entries;

static void collect_unused(const char *key, void *value, void *ctx) {
    (void)key;
    unused_entries *u = ctx;
    entry *e = value;
    if (!e->asking)
        u->unused[u->n++] = e;
}

static int used_earlier(const void *a, const void *b) {
    uint64_t x = (*(entry *const *)a)->used_ms, y = (*(entry *const *)b)->used_ms;
    return x < y ? -1 : x > y;
}

/* Forgets the half of the answers not being asked again that was used longest ago. */
static void forget_unused(user_directory *d) {
    unused_entries u = {calloc(d->entries.size, sizeof(entry *)), 0};
    if (!u.unused)
        return;
    strmap_each(&d->entries, collect_unused, &u);
    qsort(u.unused, u.n, sizeof(entry *), used_earlier);
    for (size_t i = 0; i < (u.n + 1) / 2; i++)
        free(strmap_remove(&d->entries, u.unused[i]->key));
    free(u.unused);
}

/* Whether the loop may still wait wait_ms in this window. */
static bool may_wait(user_directory *d, uint64_t now) {
    if (now >= d->window_ms + DIRECTORY_WAIT_WINDOW_MS) {
        d->window_ms = now;
        d->waited_ms = 0;
    }
    return d->waited_ms < (uint64_t)d->wait_ms;
}

/* The answer to question q (its key, name and uid set), into ret. */
static int directory_ask(user_directory *d, const entry *q, entry *ret) {
    pthread_mutex_lock(&d->lock);
    uint64_t now = clock_now_ms();
    entry *e = strmap_get(&d->entries, q->key);
    if (!e) {
        if (d->entries.size >= DIRECTORY_MAX_ENTRIES)
            forget_unused(d);
        if (!(e = malloc(sizeof(*e))) || strmap_put(&d->entries, q->key, e) < 0) {
            pthread_mutex_unlock(&d->lock);
            free(e);
            return -ENOMEM;
        }
        *e = *q;
    }
    e->used_ms = now;
    bool idle = !d->busy && !d->head;
    if (!e->asking && (!e->answered || now >= e->expires_ms) && d->queued < DIRECTORY_MAX_QUEUED) {
        e->asking = true;
        e->next = NULL;
        if (d->tail)
            d->tail->next = e;
        else
            d->head = e;
        d->tail = e;
        d->queued++;
        pthread_cond_signal(&d->work);
    }
    /* a new question to an idle thread is worth a short wait, within the window's budget */
    if (!e->answered && e->asking && idle && may_wait(d, now)) {
        struct timespec until = helper_deadline((long)((uint64_t)d->wait_ms - d->waited_ms));
        while (!e->answered && pthread_cond_timedwait(&d->answered, &d->lock, &until) == 0)
            ;
        d->waited_ms += clock_now_ms() - now;
    }
    int r = e->answered ? e->result : -ETIMEDOUT;
    if (e->answered)
        *ret = *e;
    pthread_mutex_unlock(&d->lock);
    return r;
}

int user_directory_uid(user_directory *d, const char *name, uid_t *ret_uid) {
    if (!name[0] || strlen(name) >= DIRECTORY_MAX_NAME)
        return -ENOENT;
    entry q = {.q = ASK_UID}, answer;
    snprintf(q.key, sizeof(q.key), "user %s", name);
    snprintf(q.name, sizeof(q.name), "%s", name);
    int r = directory_ask(d, &q, &answer);
    if (r == 0)
        *ret_uid = answer.found_uid;
    return r;
}

int user_directory_name(user_directory *d, uid_t uid, char *buf, size_t size) {
    entry q = {.q = ASK_NAME, .uid = uid}, answer;
    snprintf(q.key, sizeof(q.key), "uid %lu", (unsigned long)uid);
    int r = directory_ask(d, &q, &answer);
    if (r == 0)
        snprintf(buf, size, "%s", answer.found_name);
    return r;
}

int user_directory_in_group(user_directory *d, uid_t uid, const char *group) {
    if (!group[0] || strlen(group) >= DIRECTORY_MAX_NAME)
        return 0;
    entry q = {.q = ASK_IN_GROUP, .uid = uid}, answer;
    snprintf(q.key, sizeof(q.key), "group %s uid %lu", group, (unsigned long)uid);
    snprintf(q.name, sizeof(q.name), "%s", group);
    return directory_ask(d, &q, &answer);
}

unsigned long user_directory_lookups(user_directory *d) {
    pthread_mutex_lock(&d->lock);
    unsigned long n = d->lookups;
    pthread_mutex_unlock(&d->lock);
    return n;
}
