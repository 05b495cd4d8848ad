/* Finding programs for the launcher: its own directory, and what execvp would run. */
#define _GNU_SOURCE /* strchrnul */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "worker/tools/launcher.h"

int launcher_self_dir(char *buf, size_t size) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n < 0)
        return -errno;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return -ENOENT;
    *slash = '\0';
    if ((size_t)snprintf(buf, size, "%s", slash == exe ? "/" : exe) >= size)
        return -ENAMETOOLONG;
    return 0;
}

/* 0 when path is a regular file we may execute, else a negative errno. */
static int runnable(const char *path) {
    struct stat st;
    if (stat(path, &st) < 0)
        return -errno;
    if (S_ISDIR(st.st_mode))
        return -EISDIR;
    if (access(path, X_OK) < 0)
        return -errno;
    return 0;
}

int launcher_resolve_program(const char *name, char *path, size_t size, char *err, size_t err_size) {
    int r;
    if (strchr(name, '/')) {
        if ((r = runnable(name)) < 0) {
            snprintf(err, err_size, "cannot run '%s': %s", name, strerror(-r));
            return r;
        }
        if ((size_t)snprintf(path, size, "%s", name) >= size)
            return -ENAMETOOLONG;
        return 0;
    }
    if (!name[0]) {
        snprintf(err, err_size, "cannot run '': an empty program name");
        return -ENOENT;
    }
    /* PATH as execvp reads it; an empty entry is the current directory. */
    const char *search = getenv("PATH");
    if (!search)
        search = "/bin:/usr/bin";
    int found_but = 0; /* why the last match on PATH could not run */
    for (const char *p = search;; p++) {
        const char *end = strchrnul(p, ':');
        int dlen = (int)(end - p);
        if ((size_t)snprintf(path, size, "%.*s%s%s", dlen, p, dlen ? "/" : "", name) < size) {
            r = runnable(path);
            if (r == 0)
                return 0;
            if (r != -ENOENT && r != -ENOTDIR)
                found_but = r;
        }
        if (!*end)
            break;
        p = end;
    }
    char dir[PATH_MAX] = "";
    if (launcher_self_dir(dir, sizeof(dir)) == 0 && (size_t)snprintf(path, size, "%s/%s", dir, name) < size &&
        runnable(path) == 0)
        return 0;
    if (found_but) {
        snprintf(err, err_size, "cannot run '%s': %s", name, strerror(-found_but));
        return found_but;
    }
    snprintf(err, err_size, "cannot run '%s': not found on PATH%s%s", name, dir[0] ? " nor in " : "", dir);
    return -ENOENT;
}
