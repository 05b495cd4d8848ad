// The contiguous host memory libddp reads and writes for a tensor: the tensor's own where
// it is contiguous and on the CPU, else a copy (in pinned memory for a GPU tensor, as gloo
// stages), written back when the call is done.
#pragma once

#include <ATen/ATen.h>

namespace torch_ddpd {

class Staged {
  public:
    // copy_in: whether the call reads the tensor's values (not for a pure output).
    explicit Staged(const at::Tensor &tensor, bool copy_in = true);

    void *data() const {
        return host_.data_ptr();
    }
    const at::Tensor &host() const {
        return host_;
    }
    // Writes what the call left in the copy back into the tensor (nothing to do if none).
    void copy_out();

  private:
    at::Tensor tensor_, host_;
};

// One contiguous host tensor holding a list of same-typed tensors one after another, and
// the way back: for the calls that take a list (gather's outputs, scatter's inputs...).
at::Tensor flatten_to_host(const std::vector<at::Tensor> &tensors);
void unflatten_from_host(const at::Tensor &flat, std::vector<at::Tensor> &tensors);

} // namespace torch_ddpd
