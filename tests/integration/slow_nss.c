/* Slows every user and group lookup of the process it is preloaded into by
 * DDP_TEST_NSS_DELAY_MS, as NSS does when the LDAP server behind it is down (check_security
 * preloads it into ddpd). The lookups then go on to libc. */
#define _GNU_SOURCE /* RTLD_NEXT */
#include <dlfcn.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <time.h>

static void delay(void) {
    const char *env = getenv("DDP_TEST_NSS_DELAY_MS");
    long ms = env ? atol(env) : 0;
    struct timespec left = {ms / 1000, ms % 1000 * 1000000L};
    while (ms > 0 && nanosleep(&left, &left) != 0)
        ;
}

/* name(params): delayed, then libc's own (or what the next library puts in its place). */
#define DELAYED(type, name, params, args)                                                                              \
    type name params {                                                                                                 \
        delay();                                                                                                       \
        type(*next) params = (type(*) params)dlsym(RTLD_NEXT, #name);                                                  \
        return next args;                                                                                              \
    }

DELAYED(struct passwd *, getpwnam, (const char *name), (name))
DELAYED(struct passwd *, getpwuid, (uid_t uid), (uid))
DELAYED(struct group *, getgrnam, (const char *name), (name))
DELAYED(int, getpwnam_r, (const char *name, struct passwd *pw, char *buf, size_t size, struct passwd **ret),
        (name, pw, buf, size, ret))
DELAYED(int, getpwuid_r, (uid_t uid, struct passwd *pw, char *buf, size_t size, struct passwd **ret),
        (uid, pw, buf, size, ret))
DELAYED(int, getgrnam_r, (const char *name, struct group *gr, char *buf, size_t size, struct group **ret),
        (name, gr, buf, size, ret))
