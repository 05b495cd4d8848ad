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
 * ncclInProgress), at most until deadline. */
int settle(cuda_impl *c, clock_type::time_point deadline, const char *what, char *err, size_t err_size) {
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
        if (clock_type::now() >= deadline) {
            snprintf(err, err_size, "NCCL %s: not done in time (a rank missing or stuck?)", what);
            abandon(c);
            return -ETIMEDOUT;
        }
        std::this_thread::yield();
    }
}

} // namespace

void cuda_peer_close(cuda_impl *c) {
    if (!c->peer)
        return;
    char err[256];
    ncclCommFinalize(comm_of(c)); /* flushes what is queued; then free it */
    if (settle(c, clock_type::now() + std::chrono::seconds(10), "finalize", err, sizeof(err)) == 0) {
        ncclCommDestroy(comm_of(c));
        c->peer = nullptr;
    }
    CUDA_TRY(cudaEventDestroy(c->peer_ready));
    CUDA_TRY(cudaEventDestroy(c->peer_done));
    CUDA_TRY(cudaStreamDestroy(c->peer_stream));
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

int cuda_peer_join(backend *b, const void *id, size_t size, int rank, int world, int timeout_ms, char *err,
                   size_t err_size) {
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
    if (r != ncclSuccess && r != ncclInProgress)
        return fail(err, err_size, -EIO, "joining the communicator", r);
    c->peer = comm;
    int code = settle(c, clock_type::now() + std::chrono::milliseconds(timeout_ms), "joining the communicator", err,
                      err_size);
    if (code < 0)
        return code;
    CUDA_TRY(cudaStreamCreateWithFlags(&c->peer_stream, cudaStreamNonBlocking));
    CUDA_TRY(cudaEventCreateWithFlags(&c->peer_ready, cudaEventDisableTiming));
    CUDA_TRY(cudaEventCreateWithFlags(&c->peer_done, cudaEventDisableTiming));
    return 0;
}

int cuda_peer_all_reduce_avg(backend *b, float *buf, size_t n, char *err, size_t err_size) {
    cuda_impl *c = cuda_enter(b);
    if (!c->peer) {
        snprintf(err, err_size, "NCCL all-reduce: no communicator (not joined, or abandoned after an error)");
        return -ENOTCONN;
    }
    /* After the layers that made these gradients; what comes next (the optimizer) after it. */
    CUDA_TRY(cudaEventRecord(c->peer_ready, c->compute));
    CUDA_TRY(cudaStreamWaitEvent(c->peer_stream, c->peer_ready, 0));
    ncclResult_t r = ncclAllReduce(buf, buf, n, ncclFloat32, ncclAvg, comm_of(c), c->peer_stream);
    if (r != ncclSuccess && r != ncclInProgress) {
        int code = fail(err, err_size, -EIO, "all-reduce", r);
        abandon(c);
        return code;
    }
    /* Taking the call is quick; finishing it is peer_wait's. */
    int code = settle(c, clock_type::now() + std::chrono::seconds(60), "all-reduce", err, err_size);
    if (code < 0)
        return code;
    CUDA_TRY(cudaEventRecord(c->peer_done, c->peer_stream));
    CUDA_TRY(cudaStreamWaitEvent(c->compute, c->peer_done, 0));
    return 0;
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
        if (ncclCommGetAsyncError(comm_of(c), &state) != ncclSuccess ||
            (state != ncclSuccess && state != ncclInProgress)) {
            int code = fail(err, err_size, -EIO, "all-reduce", state);
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
