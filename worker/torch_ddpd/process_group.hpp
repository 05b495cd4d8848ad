// torch.distributed's backend "ddpd": a c10d::ProcessGroup over a libddp group. Each call
// checks its arguments at once (a RuntimeError on the calling thread), then runs on the
// group's CommQueue in call order and completes its Work there, with libddp's error
// (ddp_last_error(): who died, who stalled) when it fails.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "comm_queue.hpp"
#include "ddp/ddp.h"

namespace torch_ddpd {

// What check() throws: a libddp call failed, so every rank's fails (the job ended, or the
// call did not match); unlike a failure of torch's, around the call, which only this rank sees.
class LibddpError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

class ProcessGroup : public c10d::ProcessGroup {
  public:
    // What Backend.register_backend calls: joins the job (ranks and world from torch,
    // ddpd and the job from DDP_COORDINATOR / DDP_JOB as for C programs).
    static c10::intrusive_ptr<c10d::ProcessGroup> create(const c10::intrusive_ptr<c10d::Store> &store, int rank,
                                                         int size, std::chrono::milliseconds timeout);
    // Finishes what was posted and leaves the job, for every group still open: at exit.
    static void shutdown_all();

    ProcessGroup(ddp_group *group, int rank, int size);
    ~ProcessGroup() override;
    // intrusive_ptr's call when the last reference goes and a weak one is left: close.
    void release_resources() override;

    const std::string getBackendName() const override {
        return "ddpd";
    }

    c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor> &tensors,
                                             const c10d::BroadcastOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &tensors,
                                             const c10d::AllreduceOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor> &tensors,
                                                       const c10d::AllreduceCoalescedOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor> &tensors, const c10d::ReduceOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                             std::vector<at::Tensor> &inputs,
                                             const c10d::AllgatherOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &output, at::Tensor &input,
                                                   const c10d::AllgatherOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>> &outputs,
                                          std::vector<at::Tensor> &inputs, const c10d::GatherOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor> &outputs,
                                           std::vector<std::vector<at::Tensor>> &inputs,
                                           const c10d::ScatterOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor> &outputs,
                                                  std::vector<std::vector<at::Tensor>> &inputs,
                                                  const c10d::ReduceScatterOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                                                        const c10d::ReduceScatterOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor &output, at::Tensor &input,
                                                 std::vector<int64_t> &output_splits,
                                                 std::vector<int64_t> &input_splits,
                                                 const c10d::AllToAllOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
                                            const c10d::AllToAllOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &tensors, int dst, int tag) override;
    c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &tensors, int src, int tag) override;
    c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor> &tensors, int tag) override;
    c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &opts) override;

  private:
    // Runs body on the comm thread, once the caller's GPU streams are done with the
    // tensors; the Work completes with outputs, or with body's error (a failure of
    // torch's, not libddp's, aborts the job: the other ranks would wait for this one).
    // A receive (from >= 0) is set aside while the message from that rank with tag has not
    // come, and the calls after it go on (comm_queue.hpp).
    c10::intrusive_ptr<c10d::Work> post(c10d::OpType type, const char *title, std::vector<at::Tensor> outputs,
                                        std::function<void()> body, const std::vector<at::Tensor> &inputs = {},
                                        int from = -1, int tag = 0);
    // Throws libddp's account of a failed call.
    void check(int r) const;
    void close(); // leaves open_groups, then shutdown
    void shutdown();
    void scatter_rounds(const void *send, void *recv, size_t count, ddp_dtype dtype) const;

    ddp_group *group_;
    std::unique_ptr<CommQueue> queue_;
    std::atomic<unsigned long long> calls_{0};
};

} // namespace torch_ddpd
