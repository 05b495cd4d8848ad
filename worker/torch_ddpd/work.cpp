#include "work.hpp"

#include <cstdio>

#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

namespace torch_ddpd {

Work::Work(int rank, c10d::OpType type, const char *profiling_title, std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type, profiling_title), outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
}

c10::intrusive_ptr<c10::ivalue::Future> Work::getFuture() {
    return future_;
}

// Refused before completion, as gloo's: the outputs are not yet written. (The future completes
// just before the work does, its outputs then written: a caller that waited on it may ask.)
std::vector<at::Tensor> Work::result() {
    TORCH_CHECK(isCompleted() || future_->completed(), "ddpd: result() of ", c10d::opTypeToString(retrieveOpType()),
                " before the work completed: call wait() first");
    return outputs_;
}

// The future first, as gloo does: once wait() returns, the future's value is there.
void Work::complete() {
    try {
        future_->markCompleted(c10::IValue(outputs_)); // runs the callbacks (a DDP hook's) here
    } catch (const std::exception &e) {
        fprintf(stderr, "torch_ddpd: completing %s: %s\n", c10d::opTypeToString(retrieveOpType()).c_str(), e.what());
    }
    finish(); // wait() returns from here on
}

void Work::fail(std::exception_ptr error) {
    try {
        future_->setError(error);
    } catch (const std::exception &e) {
        fprintf(stderr, "torch_ddpd: failing %s: %s\n", c10d::opTypeToString(retrieveOpType()).c_str(), e.what());
    }
    finish(error); // wait() throws it
}

} // namespace torch_ddpd
