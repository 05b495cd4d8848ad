/* Large messages around the ring: rank r sends to r+1 and receives from r-1.
 *
 * Reduce-scatter passes each block once round the ring, every rank adding its part, so
 * after n-1 steps each rank holds one finished block; all-gather then passes the finished
 * blocks round. Blocks travel in chunks: a chunk is reduced and sent on as soon as it
 * arrives, so reduction of one chunk overlaps the transfer of the next, and sends are
 * zero-copy from buffers that no step writes again before the receiver has them. Each
 * block is reduced in a fixed ring order and then copied, so every rank ends with the same
 * bits. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "worker/libddp/coll.h"

#define TAG_RS(step) (step)
#define TAG_AG(step) (0x10000 + (step))

typedef struct {
    uint64_t off, len; /* elements */
} block;

static int ring_mod(int a, int n) {
    return ((a % n) + n) % n;
}

/* own: this rank's contributions; work: where partial sums land (may be own); final_dst:
 * where the finished block goes (NULL: work). start is the block sent first; block
 * start+1 finishes here. With fuse_all_gather each finished chunk goes straight on as the
 * all-gather's first step. */
static int ring_reduce_scatter(comm *c, const comm_call *call, const char *own, char *work, char *final_dst,
                               const block *blocks, int start, bool fuse_all_gather) {
    int n = c->peers.world, right = ring_mod(c->peers.rank + 1, n), left = ring_mod(c->peers.rank - 1, n);
    size_t es = dtype_size(call->t);
    uint64_t chunk = comm_chunk_elems(c, call->t);
    const block *first = &blocks[ring_mod(start, n)];
    TRY(coll_send_range(c, right, call, TAG_RS(0), own + first->off * es, first->off, first->len, true));
    for (int s = 0; s < n - 1; s++) {
        const block *b = &blocks[ring_mod(start - s - 1, n)];
        bool last = s == n - 2;
        for (uint64_t done = 0; done < b->len; done += chunk) {
            uint64_t off = b->off + done, len = b->len - done < chunk ? b->len - done : chunk;
            comm_frame *f;
            TRY(coll_recv_chunk(c, left, call, TAG_RS(s), off, len, &f));
            char *dst = last && final_dst ? final_dst + done * es : work + off * es;
            /* the partial sum so far, then this rank's part */
            int r = comm_frame_reduce_pair(c, f, dst, own + off * es, call->op);
            comm_frame_free(c, f);
            TRY(r);
            if (!last) {
                TRY(comm_send(c, right, call, TAG_RS(s + 1), off, dst, len, true));
                continue;
            }
            reduce_finish(dst, len, call->t, call->op, n);
            if (fuse_all_gather)
                TRY(comm_send(c, right, call, TAG_AG(0), off, dst, len, true));
        }
    }
    return 0;
}

/* Block start is complete in buf (and already sent when start_sent); the others arrive. */
static int ring_all_gather(comm *c, const comm_call *call, char *buf, const block *blocks, int start, bool start_sent) {
    int n = c->peers.world, right = ring_mod(c->peers.rank + 1, n), left = ring_mod(c->peers.rank - 1, n);
    size_t es = dtype_size(call->t);
    uint64_t chunk = comm_chunk_elems(c, call->t);
    if (!start_sent) {
        const block *b = &blocks[ring_mod(start, n)];
        TRY(coll_send_range(c, right, call, TAG_AG(0), buf + b->off * es, b->off, b->len, true));
    }
    for (int s = 0; s < n - 1; s++) {
        const block *b = &blocks[ring_mod(start - s - 1, n)];
        for (uint64_t done = 0; done < b->len; done += chunk) {
            uint64_t off = b->off + done, len = b->len - done < chunk ? b->len - done : chunk;
            comm_frame *f;
            TRY(coll_recv_chunk(c, left, call, TAG_AG(s), off, len, &f));
            int r = comm_frame_copy_to(c, f, buf + off * es);
            comm_frame_free(c, f);
            TRY(r);
            if (s < n - 2)
                TRY(comm_send(c, right, call, TAG_AG(s + 1), off, buf + off * es, len, true));
        }
    }
    return 0;
}

static block *ring_blocks(comm *c, uint64_t count, bool equal) {
    int n = c->peers.world;
    block *b = malloc((size_t)n * sizeof(*b));
    if (!b) {
        comm_fail(c, -ENOMEM, "out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        /* all_reduce splits its count n ways; all_gather and reduce_scatter have n blocks of count */
        b[i].off = equal ? (uint64_t)i * count : count * (uint64_t)i / (uint64_t)n;
        b[i].len = equal ? count : count * (uint64_t)(i + 1) / (uint64_t)n - b[i].off;
    }
    return b;
}

int coll_all_reduce_ring(comm *c, const coll_args *a) {
    block *blocks = ring_blocks(c, a->call.count, false);
    if (!blocks)
        return -ENOMEM;
    int r = ring_reduce_scatter(c, &a->call, a->recv, a->recv, NULL, blocks, c->peers.rank, true);
    if (r == 0)
        r = ring_all_gather(c, &a->call, a->recv, blocks, c->peers.rank + 1, true);
    r = comm_finish(c, r, a->call.deadline_ms);
    free(blocks);
    return r;
}

int coll_all_gather_ring(comm *c, const coll_args *a) {
    size_t bytes = a->call.count * dtype_size(a->call.t);
    char *own = (char *)a->recv + (size_t)c->peers.rank * bytes;
    if (own != (const char *)a->send)
        memmove(own, a->send, bytes);
    block *blocks = ring_blocks(c, a->call.count, true);
    if (!blocks)
        return -ENOMEM;
    int r = ring_all_gather(c, &a->call, a->recv, blocks, c->peers.rank, false);
    r = comm_finish(c, r, a->call.deadline_ms);
    free(blocks);
    return r;
}

int coll_reduce_scatter_ring(comm *c, const coll_args *a) {
    size_t total = (size_t)c->peers.world * a->call.count * dtype_size(a->call.t);
    char *work = malloc(total);
    block *blocks = ring_blocks(c, a->call.count, true);
    int r = -ENOMEM;
    if (work && blocks) {
        /* Starting one block back makes block r the one that finishes here. */
        r = ring_reduce_scatter(c, &a->call, a->send, work, a->recv, blocks, c->peers.rank - 1, false);
        r = comm_finish(c, r, a->call.deadline_ms);
    } else
        comm_fail(c, r, "out of memory for a reduce_scatter of %zu bytes", total);
    if (!comm_buffers_exposed(c)) /* else a peer may still read it: better leaked than reused */
        free(work);
    free(blocks);
    return r;
}
