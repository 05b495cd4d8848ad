/* Every collective through shared memory, when every rank of the job is on this host
 * (segments and waits in shm.c). A collective is a few phases: each rank copies what it
 * gives into its own staging buffer and posts; the ranks read what they need straight
 * from the others' buffers and post again; before a rank writes its buffer anew, every
 * peer has posted that it is done reading it. Large messages go in chunks of the buffer.
 *
 * Reductions run in rank order 0, 1, ..., n-1 over one slice each, by one rank each
 * (small messages: by every rank over all of it), so every rank holds the same bits, run
 * after run. Counts are per rank, as in ddp.h. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "worker/libddp/coll.h"
#include "worker/libddp/p2p_shm.h"
#include "worker/libddp/shm.h"

/* Up to this, every rank reduces all of it: one phase fewer than the slices, and at this
 * size the phases cost more than the bytes (tests/bench/allreduce_vs_mpi.sh). */
#define SHM_SMALL_MAX_BYTES (16u << 10)
/* A large reduction goes in pieces of this: a piece's copies and reads stay in cache
 * between its phases (measured against 256 KiB and 2 and 4 MiB). */
#define SHM_CHUNK_BYTES (1u << 20)
_Static_assert(SHM_CHUNK_BYTES <= SHM_BUFFER_BYTES / 2, "a piece fits half the staging buffer");
#define SHM_BLOCK_BYTES (16u << 10) /* a slice is reduced and copied out in blocks of this */
/* From this, an in-place all-reduce of ddp_alloc memory leaves the staging buffers out; below,
 * the wait before it returns (its peers read its buffer) costs more than the copies
 * (tests/bench/allreduce_vs_mpi.sh: slower at 64 and 256 KiB, faster from 1 MiB). */
#define SHM_IN_PLACE_MIN_BYTES (1u << 20)

typedef struct {
    shm_plane *plane;
    const char **inputs; /* world: a reduction's inputs, in rank order */
    char *scratch;       /* SHM_BLOCK_BYTES: a block reduced where it cannot be in place */
    p2p_shm *p2p;        /* send and recv, through the mailboxes */
} coll_shm;

static coll_shm *state(const comm *c) {
    return c->collectives_impl;
}

/* Where in a rank's staging buffer piece k of call seq lies: its two halves in turn, piece
 * after piece and call after call (every rank counts alike). So the lines a rank writes
 * were last read by its peers a piece before, not moments before: writing a line that is
 * still in a reader's L1 waits for that core to give it up (all-reduce, world 2, 64 KiB:
 * 13.6 us against 7.9, tests/bench/allreduce_vs_mpi.sh). */
static size_t staging_offset(uint64_t seq, uint64_t k) {
    return ((seq + k) & 1) * (SHM_BUFFER_BYTES / 2);
}

static char *staging(const shm_plane *s, int r, uint64_t seq, uint64_t k) {
    return shm_buffer(s, r) + staging_offset(seq, k);
}

/* Elements of t that fit a piece's half of a staging buffer, split ways ways. */
static uint64_t piece_elems(dtype t, int ways) {
    return SHM_BUFFER_BYTES / 2 / dtype_size(t) / (uint64_t)ways;
}

/* Slice r of len elements shared n ways: [*lo, *hi). */
static void slice(uint64_t len, int r, int n, uint64_t *lo, uint64_t *hi) {
    *lo = len * (uint64_t)r / (uint64_t)n;
    *hi = len * (uint64_t)(r + 1) / (uint64_t)n;
}

/* dst = x_0 op x_1 op ... op x_{n-1}: element off.. of every rank's buffer, len of them. */
static void reduce_ranks(shm_plane *s, int n, char *dst, size_t off_bytes, uint64_t len, dtype t, reduce_op op) {
    if (n == 1) {
        memcpy(dst, shm_buffer(s, 0) + off_bytes, len * dtype_size(t));
        return;
    }
    reduce_pair(dst, shm_buffer(s, 0) + off_bytes, shm_buffer(s, 1) + off_bytes, len, t, op);
    for (int r = 2; r < n; r++)
        reduce_into(dst, shm_buffer(s, r) + off_bytes, len, t, op);
}

/* Counts reading bytes from rank r; r reads as much from this rank. */
static void count_both(comm *c, int r, uint64_t read, uint64_t given) {
    if (read)
        comm_count_received(c, r, read);
    if (given)
        comm_count_sent(c, r, given);
}

/* Small: every rank copies all of it in, then reduces all of it, in rank order. */
static int all_reduce_small(comm *c, const coll_args *a, bool to_everyone) {
    shm_plane *s = state(c)->plane;
    const comm_call *call = &a->call;
    int n = c->peers.world, me = c->peers.rank;
    size_t bytes = call->count * dtype_size(call->t);
    bool keeps = to_everyone || me == call->root;
    TRY(shm_begin(c, s, call, NULL, false));
    memcpy(shm_buffer(s, me), a->send, bytes); /* not by halves (staging): at this size it gained nothing */
    TRY(shm_wait_arrivals(c, s, shm_post(s), call));
    if (keeps) {
        reduce_ranks(s, n, a->recv, 0, call->count, call->t, call->op);
        reduce_finish(a->recv, call->count, call->t, call->op, n);
    }
    for (int r = 0; r < n; r++)
        if (r != me)
            count_both(c, r, keeps ? bytes : 0, to_everyone || r == call->root ? bytes : 0);
    shm_post(s); /* done reading */
    shm_release(s);
    return 0;
}

/* dst = in[0] op in[1] op ... op in[n-1], len elements: the same order on every rank. */
static void reduce_inputs(char *dst, const char *const *in, int n, uint64_t len, dtype t, reduce_op op) {
    if (n == 1) {
        memcpy(dst, in[0], len * dtype_size(t));
        return;
    }
    reduce_pair(dst, in[0], in[1], len, t, op);
    for (int r = 2; r < n; r++)
        reduce_into(dst, in[r], len, t, op);
}

/* An in-place all-reduce where every rank's buffer is in one of its regions (ddp_alloc's
 * memory, as ddp mode's gradients): each rank reduces its slice of each piece straight
 * into its own buffer, where the others read it, and copies their slices from theirs; no
 * staging buffer is written or read. A rank returns once every other has read its slices:
 * its buffer is the caller's again. Same order, same bits as all_reduce_large. */
static int all_reduce_in_place(comm *c, const coll_args *a, const char **regions) {
    shm_plane *s = state(c)->plane;
    const comm_call *call = &a->call;
    int n = c->peers.world, me = c->peers.rank;
    size_t es = dtype_size(call->t);
    uint64_t chunk = SHM_CHUNK_BYTES / es, block = SHM_BLOCK_BYTES / es;
    char *buf = a->recv;
    const char **in = state(c)->inputs;
    for (uint64_t off = 0; off < call->count; off += chunk) {
        uint64_t len = call->count - off < chunk ? call->count - off : chunk, lo, hi;
        slice(len, me, n, &lo, &hi);
        for (uint64_t b = off + lo; b < off + hi; b += block) {
            uint64_t blen = off + hi - b < block ? off + hi - b : block;
            for (int r = 0; r < n; r++)
                in[r] = r == me ? buf + b * es : regions[r] + b * es;
            /* into the buffer where this rank's input is read by the first step (a pair);
             * else through scratch, since the first step would overwrite it unread */
            char *dst = me < 2 ? buf + b * es : state(c)->scratch;
            reduce_inputs(dst, in, n, blen, call->t, call->op);
            reduce_finish(dst, blen, call->t, call->op, n);
            if (dst != buf + b * es)
                memcpy(buf + b * es, dst, blen * es);
        }
        uint64_t reduced = shm_post(s);
        for (int r = 0; r < n; r++) {
            if (r == me)
                continue;
            uint64_t rlo, rhi;
            slice(len, r, n, &rlo, &rhi);
            TRY(shm_wait(c, s, r, reduced, call)); /* r has its slice, and is done with this rank's part of r's */
            memcpy(buf + (off + rlo) * es, regions[r] + (off + rlo) * es, (rhi - rlo) * es);
            count_both(c, r, (hi - lo + rhi - rlo) * es, (rhi - rlo + hi - lo) * es);
        }
    }
    shm_post(s);
    shm_release(s);
    /* every peer has read this rank's slices (and may be in its next call already) */
    return shm_wait_free(c, s, call);
}

/* Large: a reduce-scatter, then an all-gather (or a gather to the root), per chunk. Rank r
 * owns slice r of the chunk. Each rank copies in only what the others need (their slices
 * of its input), so its own slice's place in its buffer is free: there it reduces its
 * slice, from its own input where it lies and the peers' copies, and the others read the
 * result from there. Every rank's buffer is laid out as the chunk. An input in one of the
 * rank's regions (ddp_alloc) is not copied in: the peers read their slices of it there. */
static int all_reduce_large(comm *c, const coll_args *a, bool to_everyone) {
    shm_plane *s = state(c)->plane;
    const comm_call *call = &a->call;
    int n = c->peers.world, me = c->peers.rank;
    size_t es = dtype_size(call->t);
    uint64_t chunk = SHM_CHUNK_BYTES / es;
    bool keeps = to_everyone || me == call->root, shared = false;
    const char **in = state(c)->inputs, **regions = NULL; /* the peers' inputs where they shared them */
    for (uint64_t off = 0; off < call->count; off += chunk) {
        uint64_t len = call->count - off < chunk ? call->count - off : chunk, lo, hi, k = off / chunk;
        const char *send = (const char *)a->send + off * es;
        char *mine = staging(s, me, call->seq, k);
        if (off == 0) {
            TRY(shm_begin(c, s, call, a->send, to_everyone && a->send == a->recv));
            shared = shm_input_shared(s);
        } else {
            TRY(shm_wait_free(c, s, call));
        }
        for (int p = 0; p < n && !shared; p++) {
            uint64_t plo, phi;
            slice(len, p, n, &plo, &phi);
            if (p != me)
                memcpy(mine + plo * es, send + plo * es, (phi - plo) * es);
        }
        uint64_t given = shm_post(s);
        TRY(off == 0 ? shm_wait_arrivals(c, s, given, call) : shm_wait_all(c, s, given, call));
        if (off == 0) {
            TRY(shm_peer_inputs(c, s, call, &regions));
            /* every rank decides alike: they read the same calls */
            if (shm_all_in_place(s) && call->count * es >= SHM_IN_PLACE_MIN_BYTES)
                return all_reduce_in_place(c, a, regions);
        }
        slice(len, me, n, &lo, &hi);
        char *recv = (char *)a->recv + off * es;
        /* in blocks that stay in L1, so that the copy to recv reads what was just written */
        for (uint64_t b = lo; b < hi; b += SHM_BLOCK_BYTES / es) {
            uint64_t blen = hi - b < SHM_BLOCK_BYTES / es ? hi - b : SHM_BLOCK_BYTES / es;
            for (int r = 0; r < n; r++)
                in[r] = r == me      ? send + b * es
                        : regions[r] ? regions[r] + (off + b) * es
                                     : staging(s, r, call->seq, k) + b * es;
            reduce_inputs(mine + b * es, in, n, blen, call->t, call->op);
            reduce_finish(mine + b * es, blen, call->t, call->op, n);
            if (keeps) /* after the block's reduction: with send == recv, it was one of its inputs */
                memcpy(recv + b * es, mine + b * es, blen * es);
        }
        uint64_t reduced = shm_post(s);
        for (int r = 0; r < n; r++) {
            if (r == me)
                continue;
            uint64_t rlo, rhi;
            slice(len, r, n, &rlo, &rhi);
            /* r has read its slice of this rank's input once it posts reduced: only then may
             * recv, which may be that input, take r's result */
            if (keeps || shared)
                TRY(shm_wait(c, s, r, reduced, call));
            if (keeps)
                memcpy(recv + rlo * es, staging(s, r, call->seq, k) + rlo * es, (rhi - rlo) * es);
            /* reads: my slice of r's input, and r's reduced slice; r reads the same of mine */
            bool r_keeps = to_everyone || r == call->root;
            count_both(c, r, (hi - lo + (keeps ? rhi - rlo : 0)) * es, (rhi - rlo + (r_keeps ? hi - lo : 0)) * es);
        }
        shm_post(s); /* done reading */
        shm_release(s);
    }
    return 0;
}

/* A broadcast through the root's staging buffer goes in pieces, a ring of them: the peers
 * copy one out while the root copies the next in. From a root buffer in one of its regions
 * (ddp_alloc's memory, as dp mode's parameters) of at least BROADCAST_IN_PLACE_MIN_BYTES,
 * the peers copy it where it lies and the root waits for them; a smaller one goes through
 * the ring, so the root need not wait (MPI's eager protocol). */
#define BROADCAST_SLOTS 16
#define BROADCAST_IN_PLACE_MIN_BYTES (64u << 10)

/* Where piece k of a broadcast lies in rank r's ring: a call starts at slot 0 or 1 by turns,
 * so a one-piece broadcast does not write the lines its peers have just read (see
 * staging_offset), and does not walk the whole ring through the caches either. */
static char *broadcast_slot(const shm_plane *s, int r, uint64_t seq, uint64_t k, uint64_t piece, size_t es) {
    return shm_buffer(s, r) + (((seq & 1) + k) % BROADCAST_SLOTS) * piece * es;
}

/* Elements of t in a slot of the ring. */
static uint64_t broadcast_piece(dtype t) {
    return SHM_BUFFER_BYTES / BROADCAST_SLOTS / dtype_size(t);
}

/* Phases: every rank posts 1 + pieces (1 + 1 in place). A peer posts its arrival, then
 * one phase per piece it has copied; the root one per piece it has copied in (the first
 * is also its arrival), and a last one to match. */
static int broadcast_give(comm *c, const coll_args *a) {
    shm_plane *s = state(c)->plane;
    const comm_call *call = &a->call;
    int n = c->peers.world, me = c->peers.rank;
    size_t es = dtype_size(call->t);
    uint64_t base = shm_phase(s);
    if (shm_input_shared(s)) {
        for (int r = 0; r < n; r++)
            if (r != me)
                comm_count_sent(c, r, call->count * es);
        shm_post(s);
        TRY(shm_wait_all(c, s, base + 1, call)); /* every peer called the same (a mismatch fails now) */
        TRY(shm_wait_all(c, s, base + 2, call)); /* ... and copied it: the buffer is the caller's again */
        shm_post(s);
        shm_release(s);
        return 0;
    }
    uint64_t piece = broadcast_piece(call->t), k = 0;
    for (uint64_t off = 0; off < call->count; off += piece, k++) {
        uint64_t len = call->count - off < piece ? call->count - off : piece;
        if (k >= BROADCAST_SLOTS) /* the slot's last piece is copied out everywhere */
            TRY(shm_wait_all(c, s, base + k - BROADCAST_SLOTS + 2, call));
        memcpy(broadcast_slot(s, me, call->seq, k, piece, es), (const char *)a->recv + off * es, len * es);
        for (int r = 0; r < n; r++)
            if (r != me)
                comm_count_sent(c, r, len * es);
        shm_post(s);
    }
    shm_post(s);
    shm_release(s); /* the next call writes the ring once every peer has copied the last piece */
    return 0;
}

/* A peer: the root's first post says where its buffer is; from a region it copies it
 * whole, else each piece once the root has posted it. */
static int broadcast_take(comm *c, const coll_args *a) {
    shm_plane *s = state(c)->plane;
    const comm_call *call = &a->call;
    int root = call->root;
    size_t es = dtype_size(call->t);
    uint64_t base = shm_post(s) - 1; /* its arrival: a rank that waits for this one sees its call */
    TRY(shm_wait(c, s, root, base + 1, call));
    const char *root_buf;
    TRY(shm_peer_input(c, s, call, root, &root_buf));
    if (root_buf) {
        memcpy(a->recv, root_buf, call->count * es);
        comm_count_received(c, root, call->count * es);
        shm_post(s);
        shm_release(s);
        return 0;
    }
    uint64_t piece = broadcast_piece(call->t), k = 0;
    for (uint64_t off = 0; off < call->count; off += piece, k++) {
        uint64_t len = call->count - off < piece ? call->count - off : piece;
        if (k > 0)
            TRY(shm_wait(c, s, root, base + k + 1, call));
        memcpy((char *)a->recv + off * es, broadcast_slot(s, root, call->seq, k, piece, es), len * es);
        comm_count_received(c, root, len * es);
        shm_post(s);
    }
    shm_release(s);
    return 0;
}

static int broadcast(comm *c, const coll_args *a) {
    if (a->call.count == 0)
        return 0;
    shm_plane *s = state(c)->plane;
    bool root = c->peers.rank == a->call.root;
    bool large = a->call.count * dtype_size(a->call.t) >= BROADCAST_IN_PLACE_MIN_BYTES;
    TRY(shm_begin(c, s, &a->call, root && large ? a->recv : NULL, false));
    return root ? broadcast_give(c, a) : broadcast_take(c, a);
}

/* gather (to the root) and all_gather (to everyone): each copies its part in, readers copy out. */
static int gather(comm *c, const coll_args *a, bool to_everyone) {
    shm_plane *s = state(c)->plane;
    const comm_call *call = &a->call;
    int n = c->peers.world, me = c->peers.rank;
    size_t es = dtype_size(call->t), bytes = call->count * es;
    bool keeps = to_everyone || me == call->root;
    if (keeps) /* this rank's own part first: send may be its place in recv */
        memmove((char *)a->recv + (size_t)me * bytes, a->send, bytes);
    uint64_t chunk = piece_elems(call->t, 1);
    for (uint64_t off = 0; off < call->count; off += chunk) {
        uint64_t len = call->count - off < chunk ? call->count - off : chunk, k = off / chunk;
        TRY(off ? shm_wait_free(c, s, call) : shm_begin(c, s, call, NULL, false));
        memcpy(staging(s, me, call->seq, k), (const char *)a->send + off * es, len * es);
        uint64_t given = shm_post(s);
        for (int r = 0; r < n && keeps; r++) {
            if (r == me)
                continue;
            TRY(shm_wait(c, s, r, given, call));
            memcpy((char *)a->recv + (size_t)r * bytes + off * es, staging(s, r, call->seq, k), len * es);
            count_both(c, r, len * es, to_everyone ? len * es : 0);
        }
        if (!keeps)
            comm_count_sent(c, call->root, len * es);
        shm_post(s);
        shm_release(s);
    }
    return 0;
}

/* The root lays out every rank's part of a chunk in its buffer; each copies its own out. */
static int scatter(comm *c, const coll_args *a) {
    shm_plane *s = state(c)->plane;
    const comm_call *call = &a->call;
    int n = c->peers.world, me = c->peers.rank, root = call->root;
    size_t es = dtype_size(call->t), bytes = call->count * es;
    uint64_t chunk = piece_elems(call->t, n);
    for (uint64_t off = 0; off < call->count; off += chunk) {
        uint64_t len = call->count - off < chunk ? call->count - off : chunk, k = off / chunk;
        /* every rank writes its call; only the root's buffer is written, and read */
        TRY(off == 0 ? shm_begin(c, s, call, NULL, false) : me == root ? shm_wait_free(c, s, call) : 0);
        if (me == root) {
            for (int r = 0; r < n; r++)
                if (r != me) {
                    memcpy(staging(s, me, call->seq, k) + (size_t)r * len * es,
                           (const char *)a->send + (size_t)r * bytes + off * es, len * es);
                    comm_count_sent(c, r, len * es);
                }
        }
        uint64_t given = shm_post(s);
        if (me != root) {
            TRY(shm_wait(c, s, root, given, call));
            memcpy((char *)a->recv + off * es, staging(s, root, call->seq, k) + (size_t)me * len * es, len * es);
            comm_count_received(c, root, len * es);
        }
        shm_post(s);
        shm_release(s);
    }
    if (me == root) /* last: recv may overlap a part the others were still to read */
        memmove(a->recv, (const char *)a->send + (size_t)me * bytes, bytes);
    return 0;
}

/* Each rank lays out its n blocks' chunk; rank r reduces block r over every buffer. */
static int reduce_scatter(comm *c, const coll_args *a) {
    shm_plane *s = state(c)->plane;
    const comm_call *call = &a->call;
    int n = c->peers.world, me = c->peers.rank;
    size_t es = dtype_size(call->t), bytes = call->count * es;
    uint64_t chunk = piece_elems(call->t, n);
    for (uint64_t off = 0; off < call->count; off += chunk) {
        uint64_t len = call->count - off < chunk ? call->count - off : chunk, k = off / chunk;
        TRY(off ? shm_wait_free(c, s, call) : shm_begin(c, s, call, NULL, false));
        for (int b = 0; b < n; b++)
            memcpy(staging(s, me, call->seq, k) + (size_t)b * len * es,
                   (const char *)a->send + (size_t)b * bytes + off * es, len * es);
        uint64_t given = shm_post(s);
        TRY(off == 0 ? shm_wait_arrivals(c, s, given, call) : shm_wait_all(c, s, given, call));
        char *dst = (char *)a->recv + off * es;
        reduce_ranks(s, n, dst, staging_offset(call->seq, k) + (size_t)me * len * es, len, call->t, call->op);
        reduce_finish(dst, len, call->t, call->op, n);
        for (int r = 0; r < n; r++)
            if (r != me)
                count_both(c, r, len * es, len * es);
        shm_post(s);
        shm_release(s);
    }
    return 0;
}

/* Every rank posts that it is here and waits for the others' posts; a second post says it
 * has checked theirs (their calls stay in their headers until then). */
static int barrier(comm *c, const coll_args *a) {
    shm_plane *s = state(c)->plane;
    TRY(shm_begin(c, s, &a->call, NULL, false));
    TRY(shm_wait_arrivals(c, s, shm_post(s), &a->call));
    shm_post(s);
    shm_release(s);
    return 0;
}

static int coll_shm_dispatch(comm *c, const coll_args *a) {
    size_t bytes = a->call.count * dtype_size(a->call.t);
    switch (a->call.kind) {
    case COLL_ALL_REDUCE:
    case COLL_REDUCE: {
        bool to_everyone = a->call.kind == COLL_ALL_REDUCE;
        return bytes <= SHM_SMALL_MAX_BYTES ? all_reduce_small(c, a, to_everyone) : all_reduce_large(c, a, to_everyone);
    }
    case COLL_BROADCAST:
        return broadcast(c, a);
    case COLL_GATHER:
        return gather(c, a, false);
    case COLL_ALL_GATHER:
        return gather(c, a, true);
    case COLL_SCATTER:
        return scatter(c, a);
    case COLL_REDUCE_SCATTER:
        return reduce_scatter(c, a);
    case COLL_BARRIER:
        return barrier(c, a);
    case COLL_SEND:
        return a->receiving ? p2p_shm_recv(c, state(c)->p2p, a) : p2p_shm_send(c, state(c)->p2p, a);
    }
    return comm_fail(c, -EINVAL, "%s does not go through shared memory", coll_kind_name(a->call.kind));
}

static int coll_shm_run(comm *c, const coll_args *a) {
    int r = coll_shm_dispatch(c, a);
    if (r < 0 && a->call.kind != COLL_SEND) /* a numbered collective: withdrawn */
        shm_give_up(state(c)->plane, a->call.seq);
    return r;
}

static void coll_shm_close(comm *c) {
    coll_shm *x = state(c);
    if (!x)
        return;
    p2p_shm_close(x->p2p);
    shm_close_plane(x->plane);
    free(x->inputs);
    free(x->scratch);
    free(x);
    c->collectives = NULL;
    c->collectives_impl = NULL;
}

static int coll_shm_alloc(comm *c, size_t bytes, void **ret) {
    return shm_region_open(c, state(c)->plane, bytes, ret);
}

static int coll_shm_free(comm *c, void *buf) {
    return shm_region_close(c, state(c)->plane, buf);
}

static int coll_shm_probe(comm *c, int src, int32_t tag) {
    return p2p_shm_probe(c, state(c)->p2p, src, tag);
}

static const comm_collectives coll_shm_table = {
    .name = "shm",
    .run = coll_shm_run,
    .alloc = coll_shm_alloc,
    .free = coll_shm_free,
    .probe = coll_shm_probe,
    .close = coll_shm_close,
};

int coll_shm_open(comm *c) {
    coll_shm *x = calloc(1, sizeof(*x));
    if (!x || !(x->inputs = calloc((size_t)c->peers.world, sizeof(char *))) ||
        !(x->scratch = aligned_alloc(64, SHM_BLOCK_BYTES))) {
        if (x)
            free(x->inputs);
        free(x);
        return comm_fail(c, -ENOMEM, "out of memory");
    }
    int r = shm_open_plane(c, &x->plane);
    if (r == 0 && (r = p2p_shm_open(c, x->plane, &x->p2p)) < 0)
        shm_close_plane(x->plane);
    if (r < 0) {
        free(x->inputs);
        free(x->scratch);
        free(x);
        return r;
    }
    c->collectives = &coll_shm_table;
    c->collectives_impl = x;
    return 0;
}
