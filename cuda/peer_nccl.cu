/* The CUDA backend's device-side all-reduce on NCCL (ddp-worker --transport nccl): the
 * ranks' gradients are averaged GPU to GPU, across machines too, without staging through
 * the host. Rank 0 makes the communicator's id and the job's store in ddpd hands it to the
 * others, as torch's TCPStore does.
 *
 * The communicator is non-blocking (NCCL's config.blocking = 0), so no call can hang: every
 * wait polls ncclCommGetAsyncError against a deadline, and a dead peer or an ended job
 * aborts the communicator (ncclCommAbort) instead of waiting forever. */
#include <chrono>
#include <cstdio>
#include <cstring>
#include <errno.h>
#include <nccl.h>
#include <thread>

#include "cuda/check.h"
#include "cuda/impl.h"

static_assert(sizeof(ncclUniqueId) == BACKEND_PEER_ID_BYTES, "the store carries NCCL's whole id");

namespace {

using clock_type = std::chrono::steady_clock;

ncclComm_t comm_of(const cuda_impl *c) {
    return static_cast<ncclComm_t>(c->peer);
}

int fail(char *err, size_t err_size, int code, const char *what, ncclResult_t r) {
    snprintf(err, err_size, "NCCL %s: %s", what, ncclGetErrorString(r));
    return code;
}

/* Ends the communicator on a failure: its peers may never answer again. */
void abandon(cuda_impl *c) {
    if (c->peer) {
        ncclCommAbort(comm_of(c));
        c->peer = nullptr;
    }
}

/* Waits until the communicator's last call has been taken (non-blocking calls may return
 * ncclInProgress): at most timeout_ms, and not once should_stop says the job has ended. */
int settle(cuda_impl *c, int timeout_ms, int (*should_stop)(void *), void *ctx, const char *what, char *err,
           size_t err_size) {
    auto deadline = clock_type::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
        ncclResult_t state = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(comm_of(c), &state);
        if (r != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
            int code = fail(err, err_size, -EIO, what, r != ncclSuccess ? r : state);
            abandon(c);
            return code;
        }
        if (state == ncclSuccess)
            return 0;
        if (should_stop && should_stop(ctx)) {
            snprintf(err, err_size, "NCCL %s abandoned: the job has ended", what);
            abandon(c);
            return -ECONNABORTED;
        }
        if (clock_type::now() >= deadline) {
            snprintf(err, err_size, "NCCL %s: not done within %d ms (a rank missing or stuck?)", what, timeout_ms);
            abandon(c);
            return -ETIMEDOUT;
        }
        std::this_thread::yield();
    }
}

} // namespace

void cuda_peer_close(cuda_impl *c) {
    char err[256];
    if (c->peer) {
        ncclCommFinalize(comm_of(c)); /* flushes what is queued; then free it */
        if (settle(c, 10000, nullptr, nullptr, "finalize", err, sizeof(err)) == 0) {
            ncclCommDestroy(comm_of(c));
            c->peer = nullptr;
        }
    }
    if (c->peer_stream) { /* also after an abandoned communicator */
        CUDA_TRY(cudaEventDestroy(c->peer_ready));
        CUDA_TRY(cudaStreamDestroy(c->peer_stream));
        c->peer_stream = nullptr;
    }
}

int cuda_peer_id(backend *b, void *id, size_t size, char *err, size_t err_size) {
    cuda_enter(b);
    if (size < sizeof(ncclUniqueId)) {
        snprintf(err, err_size, "NCCL's id needs %zu bytes, not %zu", sizeof(ncclUniqueId), size);
        return -EINVAL;
    }
    ncclResult_t r = ncclGetUniqueId(static_cast<ncclUniqueId *>(id));
    return r == ncclSuccess ? 0 : fail(err, err_size, -EIO, "getting a unique id", r);
}

int cuda_peer_join(backend *b, const void *id, size_t size, int rank, int world, int timeout_ms,
                   int (*should_stop)(void *ctx), void *ctx, char *err, size_t err_size) {
    cuda_impl *c = cuda_enter(b);
    if (size < sizeof(ncclUniqueId) || c->peer) {
        snprintf(err, err_size, "NCCL join: %s", c->peer ? "already joined" : "the id is too short");
        return -EINVAL;
    }
    ncclUniqueId uid;
    memcpy(&uid, id, sizeof(uid));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    ncclResult_t r = ncclCommInitRankConfig(&comm, world, uid, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
        if (comm)
            ncclCommAbort(comm);
        return fail(err, err_size, -EIO, "joining the communicator", r);
    }
    c->peer = comm;
    c->peer_timeout_ms = timeout_ms;
    int code = settle(c, timeout_ms, should_stop, ctx, "joining the communicator", err, err_size);
    if (code < 0)
        return code;
    CUDA_TRY(cudaStreamCreateWithFlags(&c->peer_stream, cudaStreamNonBlocking));
    CUDA_TRY(cudaEventCreateWithFlags(&c->peer_ready, cudaEventDisableTiming));
    return 0;
}

int cuda_peer_all_reduce_avg(backend *b, float *buf, size_t n, char *err, size_t err_size) {
    cuda_impl *c = cuda_enter(b);
    if (!c->peer) {
        snprintf(err, err_size, "NCCL all-reduce: no communicator (not joined, or abandoned after an error)");
        return -ENOTCONN;
    }
    /* After the layers that made these gradients, while the compute stream goes on with the
     * layers before them; the optimizer is queued once peer_wait has seen all of it done. */
    CUDA_TRY(cudaEventRecord(c->peer_ready, c->compute));
    CUDA_TRY(cudaStreamWaitEvent(c->peer_stream, c->peer_ready, 0));
    ncclResult_t r = ncclAllReduce(buf, buf, n, ncclFloat32, ncclAvg, comm_of(c), c->peer_stream);
    if (r != ncclSuccess && r != ncclInProgress) {
        int code = fail(err, err_size, -EIO, "all-reduce", r);
        abandon(c);
        return code;
    }
    /* Taking the call is quick (NCCL may connect now, on first use); finishing it is peer_wait's. */
    return settle(c, c->peer_timeout_ms, nullptr, nullptr, "all-reduce", err, err_size);
}

int cuda_peer_wait(backend *b, int timeout_ms, int (*should_stop)(void *ctx), void *ctx, char *err,
                   size_t err_size) {
    cuda_impl *c = cuda_enter(b);
    if (!c->peer)
        return 0;
    auto deadline = clock_type::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
        cudaError_t e = cudaStreamQuery(c->peer_stream);
        if (e == cudaSuccess)
            return 0;
        if (e != cudaErrorNotReady)
            CUDA_TRY(e);
        ncclResult_t state = ncclSuccess;
        ncclResult_t asked = ncclCommGetAsyncError(comm_of(c), &state);
        if (asked != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
            int code = fail(err, err_size, -EIO, "all-reduce", asked != ncclSuccess ? asked : state);
            abandon(c);
            return code;
        }
        if (should_stop && should_stop(ctx)) {
            snprintf(err, err_size, "NCCL all-reduce abandoned: the job has ended");
            abandon(c);
            return -ECONNABORTED;
        }
        if (clock_type::now() >= deadline) {
            snprintf(err, err_size, "NCCL all-reduce not done within %d ms (a rank missing or stuck?)", timeout_ms);
            abandon(c);
            return -ETIMEDOUT;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
}
