// What a process group's call returns at once: completed by the thread that ran it, with the
// output tensors or the error, and with a future for DistributedDataParallel's buckets and
// communication hooks.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

namespace torch_ddpd {

class Work : public c10d::Work {
  public:
    Work(int rank, c10d::OpType type, const char *profiling_title, std::vector<at::Tensor> outputs);

    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
    std::vector<at::Tensor> result() override;

    // Called once, by the thread that ran the call (comm_queue.hpp).
    void complete();
    void fail(std::exception_ptr error);

  private:
    std::vector<at::Tensor> outputs_;
    c10::intrusive_ptr<c10::ivalue::Future> future_;
};

} // namespace torch_ddpd
