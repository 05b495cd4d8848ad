/* Errors are negative errno values, as in systemd and the Linux kernel: a function that
 * can fail returns 0 (or a count) on success and -E... on failure. The codes below are the
 * ones ddpd gives a meaning of its own; error_string() describes any of them. */
#pragma once
#include <errno.h>

/* The meanings, for reference:
 *  -ETIMEDOUT       a wait ran out of time
 *  -ECONNABORTED    the job was aborted: a member died, or ddpd or an operator ended it
 *  -ECONNREFUSED    the coordinator refused the request (reject)
 *  -EHOSTUNREACH    no coordinator answered
 *  -EPROTO          a peer broke the protocol (unexpected or malformed message)
 *  -EBADMSG         a message could not be decoded
 *  -EMSGSIZE        a message, frame or field exceeds its limit
 *  -EPROTONOSUPPORT protocol versions differ
 *  -EEXIST          the rank is already taken
 *  -EBUSY           the job is already running
 *  -ESHUTDOWN       the coordinator is shutting down
 *  -EPIPE           a member left the job
 *  -ENOSPC          a per-job limit (store size, number of jobs) was reached
 */

/* A human description of err (negative or zero); never NULL, static, the same on every
 * thread and call. */
const char *error_string(int err);

/* Evaluate a call that returns 0 or a negative error; return the error from the caller. */
#define TRY(expr)                   \
    do {                            \
        int try_r_ = (expr);        \
        if (try_r_ < 0)             \
            return try_r_;          \
    } while (0)
