#include "work.hpp"

#include <ATen/core/ivalue.h>

namespace torch_ddpd {

Work::Work(int rank, c10d::OpType type, const char *profiling_title, std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type, profiling_title), outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
}

c10::intrusive_ptr<c10::ivalue::Future> Work::getFuture() {
    return future_;
}

std::vector<at::Tensor> Work::result() {
    return outputs_;
}

void Work::complete() {
    finish();                                      // wait() returns from here on
    future_->markCompleted(c10::IValue(outputs_)); // runs the callbacks (a DDP hook's) here
}

void Work::fail(std::exception_ptr error) {
    finish(error); // wait() throws it
    future_->setError(error);
}

} // namespace torch_ddpd
