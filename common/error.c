#define _GNU_SOURCE /* strerrordesc_np */
#include "common/error.h"

#include <string.h>

static const struct {
    int code;
    const char *text;
} error_table[] = {
    {ETIMEDOUT, "timed out"},
    {ECONNABORTED, "job aborted: a member died or the job was stopped"},
    {ECONNREFUSED, "refused by the coordinator"},
    {EHOSTUNREACH, "no coordinator answered"},
    {EPROTO, "protocol error: unexpected or malformed message"},
    {EBADMSG, "malformed message: it could not be decoded"},
    {EMSGSIZE, "message, frame or field too large"},
    {EPROTONOSUPPORT, "protocol version mismatch"},
    {EEXIST, "rank already taken"},
    {EBUSY, "job already running"},
    {ESHUTDOWN, "coordinator shutting down"},
    {EPIPE, "a member left the job"},
    {ENOSPC, "limit reached"},
    {EINVAL, "invalid argument"},
    {ENOMEM, "out of memory"},
    {ENOENT, "not found"},
};

const char *error_string(int err) {
    if (err == 0)
        return "success";
    if (err > 0)
        return "invalid error code (errors are negative)";
    for (size_t i = 0; i < sizeof(error_table) / sizeof(error_table[0]); i++)
        if (error_table[i].code == -err)
            return error_table[i].text;
    /* Static text for every errno glibc knows (strerror's buffer for the others would be
     * overwritten by the next call, on any thread). */
    const char *text = strerrordesc_np(-err);
    return text ? text : "unknown error";
}
