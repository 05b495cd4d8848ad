#include "worker/trainer/checkpoint_keep.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int by_step_descending(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The step of name if it is base.STEP as this file names them (no sign, no leading zero:
 * a user's copy named base.016 is not step 16's link), else -1. */
static int64_t step_of(const char *name, const char *base) {
    size_t n = strlen(base);
    if (strncmp(name, base, n) != 0 || name[n] != '.' || !name[n + 1] || (name[n + 1] == '0' && name[n + 2]))
        return -1;
    char *end;
    errno = 0;
    unsigned long long step = strtoull(name + n + 1, &end, 10);
    return *end || errno || name[n + 1] < '0' || name[n + 1] > '9' ? -1 : (int64_t)step;
}

/* Whether name is base.STEP.new (or base.STEP.new-PID, as earlier versions named it): a
 * link not renamed into place yet (one writer per checkpoint: it is not a live one's; a
 * user's copy is not named so). */
static bool is_leftover(const char *name, const char *base) {
    size_t n = strlen(base);
    const char *mark = strncmp(name, base, n) == 0 && name[n] == '.' ? strstr(name + n + 1, ".new") : NULL;
    if (!mark || (mark[4] && (mark[4] != '-' || !mark[5] || strspn(mark + 5, "0123456789") != strlen(mark + 5))))
        return false;
    char stem[PATH_MAX];
    if ((size_t)(mark - name) >= sizeof(stem))
        return false;
    snprintf(stem, sizeof(stem), "%.*s", (int)(mark - name), name);
    return step_of(stem, base) >= 0;
}

static bool made_here(const checkpoint_links *own, uint64_t step) {
    for (size_t i = 0; i < own->n_made; i++)
        if (own->made[i] == step)
            return true;
    return false;
}

static bool own_link(const checkpoint_links *own, uint64_t step) {
    return (own->resumed && step <= own->resumed_step) || made_here(own, step);
}

static void forget(checkpoint_links *own, uint64_t step) {
    for (size_t i = 0; i < own->n_made; i++)
        if (own->made[i] == step) {
            own->made[i] = own->made[--own->n_made];
            return;
        }
}

void checkpoint_links_free(checkpoint_links *own) {
    free(own->made);
    own->made = NULL;
    own->n_made = own->room = 0;
}

int checkpoint_keep(const char *path, uint64_t step, int keep, checkpoint_links *own, char *err, size_t err_size) {
    if (keep <= 1)
        return 0;
    if (!made_here(own, step) && own->n_made == own->room) { /* room first: a link not listed would be lost track of */
        uint64_t *grown = realloc(own->made, (own->room ? 2 * own->room : 16) * sizeof(uint64_t));
        if (!grown) {
            snprintf(err, err_size, "--checkpoint-keep: out of memory");
            return -ENOMEM;
        }
        own->made = grown;
        own->room = own->room ? 2 * own->room : 16;
    }
    char link_path[PATH_MAX], dir[PATH_MAX];
    if (snprintf(link_path, sizeof(link_path), "%s.%llu", path, (unsigned long long)step) >= (int)sizeof(link_path)) {
        snprintf(err, err_size, "--checkpoint-keep: %s.%llu: the name is too long", path, (unsigned long long)step);
        return -ENAMETOOLONG;
    }
    /* linked under a name of its own, then renamed over a link of the same step (a save at
     * that step again, after a resume): a link that fails leaves the older one in place */
    char fresh[PATH_MAX + 8];
    snprintf(fresh, sizeof(fresh), "%s.new", link_path);
    unlink(fresh); /* a killed run's (below: all of them go) */
    if (linkat(AT_FDCWD, path, AT_FDCWD, fresh, AT_SYMLINK_FOLLOW) < 0 || rename(fresh, link_path) < 0) {
        int r = -errno;
        unlink(fresh);
        snprintf(err, err_size, "--checkpoint-keep: cannot link %s as %s: %s", path, link_path, strerror(-r));
        return r;
    }
    if (!made_here(own, step))
        own->made[own->n_made++] = step;
    /* the others, newest first: all but keep go */
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    if (slash)
        *(slash == dir ? slash + 1 : slash) = '\0';
    else
        snprintf(dir, sizeof(dir), ".");
    DIR *d = opendir(dir);
    if (!d) {
        int r = -errno;
        snprintf(err, err_size, "--checkpoint-keep: cannot list %s: %s", dir, strerror(-r));
        return r;
    }
    /* Only the run's own (checkpoint_links), and never above the one just made (the future
     * a resume from an older copy left). */
    uint64_t *steps = NULL;
    size_t n = 0, room = 0;
    bool fits = true;
    for (struct dirent *e; fits && (e = readdir(d));) {
        if (is_leftover(e->d_name, base)) { /* a run killed between a link and its rename left it */
            unlinkat(dirfd(d), e->d_name, 0);
            continue;
        }
        int64_t s = step_of(e->d_name, base);
        if (s < 0 || (uint64_t)s > step || !own_link(own, (uint64_t)s))
            continue;
        if (n == room) {
            uint64_t *grown = realloc(steps, (room = room ? 2 * room : 64) * sizeof(uint64_t));
            if (!(fits = grown != NULL))
                break;
            steps = grown;
        }
        steps[n++] = (uint64_t)s;
    }
    closedir(d);
    if (!fits) {
        free(steps);
        snprintf(err, err_size, "--checkpoint-keep: out of memory");
        return -ENOMEM;
    }
    qsort(steps, n, sizeof(uint64_t), by_step_descending);
    int r = 0;
    for (size_t i = (size_t)keep; i < n; i++) {
        snprintf(link_path, sizeof(link_path), "%s.%llu", path, (unsigned long long)steps[i]);
        if (unlink(link_path) < 0 && errno != ENOENT) {
            if (r == 0) {
                r = -errno;
                snprintf(err, err_size, "--checkpoint-keep: cannot remove %s: %s", link_path, strerror(-r));
            }
        } else
            forget(own, steps[i]);
    }
    free(steps);
    return r;
}
