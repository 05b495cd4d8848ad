/* ddp_alloc and ddp_free: memory that the collectives read in place, as MPI_Alloc_mem's.
 * Over shared memory it is a region every rank maps (coll_shm.c): a collective whose input
 * lies in it skips the copy into the staging buffer. Elsewhere it is page-aligned private
 * memory, so a program runs the same over any transport. */
#include <errno.h>
#include <stdlib.h>

#include "common/error.h"
#include "ddp/ddp.h"
#include "worker/libddp/group.h"

#define ALLOC_ALIGN 4096

static int alloc_private(ddp_group *g, size_t bytes, void **ret) {
    void **grown = realloc(g->private_buffers, (g->n_private_buffers + 1) * sizeof(void *));
    if (!grown)
        return group_fail(g, -ENOMEM, "ddp_alloc: out of memory");
    g->private_buffers = grown;
    /* whole pages: a device that pins it (cudaHostRegister) pins no neighbour's bytes */
    size_t whole = (bytes + ALLOC_ALIGN - 1) / ALLOC_ALIGN * ALLOC_ALIGN;
    if (posix_memalign(ret, ALLOC_ALIGN, whole) != 0)
        return group_fail(g, -ENOMEM, "ddp_alloc: out of memory for %zu bytes", bytes);
    g->private_buffers[g->n_private_buffers++] = *ret;
    return 0;
}

DDP_EXPORT void *ddp_alloc(ddp_group *g, size_t bytes) {
    if (!g || g->failed)
        return NULL;
    if (bytes == 0 || bytes > DDP_MAX_ALLOC_BYTES) {
        group_fail(g, -EINVAL, "ddp_alloc: %zu bytes: from 1 byte to %llu", bytes,
                   (unsigned long long)DDP_MAX_ALLOC_BYTES);
        return NULL;
    }
    coll_drain(g); /* a collective of the job: after every call before it */
    comm *c = &g->comm;
    void *buf = NULL;
    if (c->collectives && c->collectives->alloc) {
        int r = c->collectives->alloc(c, bytes, &buf);
        if (r < 0) { /* the ranks may be out of step: as after a failed collective */
            g->failed = r;
            return NULL;
        }
        return buf;
    }
    return alloc_private(g, bytes, &buf) < 0 ? NULL : buf;
}

DDP_EXPORT int ddp_free(ddp_group *g, void *buf) {
    if (!g)
        return -EINVAL;
    if (!buf)
        return 0;
    coll_drain(g); /* no request before it still reads it */
    for (size_t i = 0; i < g->n_private_buffers; i++)
        if (g->private_buffers[i] == buf) {
            free(buf);
            g->private_buffers[i] = g->private_buffers[--g->n_private_buffers];
            return 0;
        }
    comm *c = &g->comm;
    if (c->collectives && c->collectives->free)
        return c->collectives->free(c, buf);
    return group_fail(g, -EINVAL, "ddp_free: %p is not memory ddp_alloc gave", buf);
}
