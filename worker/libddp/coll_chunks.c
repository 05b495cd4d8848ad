/* The chunked transfers every algorithm is built of: a range of elements goes out as
 * frames of at most comm_chunk_elems() each, and comes back in frame by frame, each
 * checked to carry exactly the elements due. */
#include "common/error.h"
#include "worker/libddp/coll.h"

int coll_send_range(comm *c, int dst, const comm_call *call, int32_t tag, const char *buf, uint64_t offset, uint64_t n,
                    bool zero_copy) {
    uint64_t chunk = comm_chunk_elems(c, call->t);
    size_t es = dtype_size(call->t);
    for (uint64_t done = 0; done < n; done += chunk) {
        uint64_t len = n - done < chunk ? n - done : chunk;
        TRY(comm_send(c, dst, call, tag, offset + done, buf + done * es, len, zero_copy));
    }
    return 0;
}

int coll_recv_chunk(comm *c, int src, const comm_call *call, int32_t tag, uint64_t offset, uint64_t n,
                    comm_frame **ret_frame) {
    comm_frame *f;
    TRY(comm_recv(c, src, call, tag, &f));
    int r = comm_expect_range(c, f, call, offset, n);
    if (r < 0) {
        comm_frame_free(c, f);
        return r;
    }
    *ret_frame = f;
    return 0;
}

int coll_recv_range(comm *c, int src, const comm_call *call, int32_t tag, char *buf, uint64_t offset, uint64_t n) {
    uint64_t chunk = comm_chunk_elems(c, call->t);
    size_t es = dtype_size(call->t);
    for (uint64_t done = 0; done < n; done += chunk) {
        uint64_t len = n - done < chunk ? n - done : chunk;
        comm_frame *f;
        TRY(coll_recv_chunk(c, src, call, tag, offset + done, len, &f));
        int r = comm_frame_copy_to(c, f, buf + done * es);
        comm_frame_free(c, f);
        TRY(r);
    }
    return 0;
}
