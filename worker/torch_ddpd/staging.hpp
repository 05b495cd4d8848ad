// The contiguous host memory libddp reads and writes for a tensor: the tensor's own where
// it is contiguous and on the CPU, else a copy (in pinned memory for a GPU tensor, as gloo
// stages), written back when the call is done.
#pragma once

#include <memory>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/Event.h>

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

// The caller's GPU work on a call's tensors, as queued when it made the call: the comm
// thread's stream waits for it before staging (the caller's current stream may be one
// that the comm thread's default stream does not wait for), as gloo's CUDA works do.
class DeviceReady {
  public:
    // On the calling thread; nullptr when no tensor is on a GPU.
    static std::shared_ptr<const DeviceReady> after_current_streams(const std::vector<at::Tensor> &a,
                                                                    const std::vector<at::Tensor> &b);
    // On the comm thread.
    void wait() const;
    // On the comm thread, once the call is done: what it queued on the devices of these
    // tensors (a copy from one GPU tensor to another is asynchronous) has run, so that
    // the work is complete when it says so, on whatever stream the caller then reads.
    static void finish(const std::vector<at::Tensor> &tensors);
    // The device of the first tensor on a GPU, if any: the comm thread's current device
    // for the call and its callbacks (else GPU 0, where a rank on another would allocate).
    static c10::optional<c10::Device> device_of(const std::vector<at::Tensor> &tensors);

  private:
    std::vector<c10::Event> events_; // one per device
};

} // namespace torch_ddpd
