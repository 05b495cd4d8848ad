/* Slows calls of the process it is preloaded into, as a machine in trouble does: every
 * user and group lookup by DDP_TEST_NSS_DELAY_MS (NSS, when the LDAP server behind it is
 * down), every fsync by DDP_TEST_FSYNC_DELAY_MS (a disk under load, an NFS server far
 * away). check_security and check_service preload it into ddpd. The calls then go on to
 * libc. */
#define _GNU_SOURCE /* RTLD_NEXT */
#include <dlfcn.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void delay(const char *variable) {
    const char *env = getenv(variable);
    long ms = env ? atol(env) : 0;
    struct timespec left = {ms / 1000, ms % 1000 * 1000000L};
    while (ms > 0 && nanosleep(&left, &left) != 0)
        ;
}

/* name(params): delayed, then libc's own (or what the next library puts in its place). */
#define DELAYED(variable, type, name, params, args)                                                                    \
    type name params {                                                                                                 \
        delay(variable);                                                                                               \
        type(*next) params = (type(*) params)dlsym(RTLD_NEXT, #name);                                                  \
        return next args;                                                                                              \
    }

DELAYED("DDP_TEST_NSS_DELAY_MS", struct passwd *, getpwnam, (const char *name), (name))
DELAYED("DDP_TEST_NSS_DELAY_MS", struct passwd *, getpwuid, (uid_t uid), (uid))
DELAYED("DDP_TEST_NSS_DELAY_MS", struct group *, getgrnam, (const char *name), (name))
DELAYED("DDP_TEST_NSS_DELAY_MS", int, getpwnam_r,
        (const char *name, struct passwd *pw, char *buf, size_t size, struct passwd **ret), (name, pw, buf, size, ret))
DELAYED("DDP_TEST_NSS_DELAY_MS", int, getpwuid_r,
        (uid_t uid, struct passwd *pw, char *buf, size_t size, struct passwd **ret), (uid, pw, buf, size, ret))
DELAYED("DDP_TEST_NSS_DELAY_MS", int, getgrnam_r,
        (const char *name, struct group *gr, char *buf, size_t size, struct group **ret), (name, gr, buf, size, ret))
DELAYED("DDP_TEST_FSYNC_DELAY_MS", int, fsync, (int fd), (fd))
DELAYED("DDP_TEST_FSYNC_DELAY_MS", int, fdatasync, (int fd), (fd))
