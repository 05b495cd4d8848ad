#include "staging.hpp"

#include <algorithm>

#include <c10/core/impl/VirtualGuardImpl.h>

namespace torch_ddpd {

namespace {

at::Tensor host_like(const at::Tensor &t) {
    return at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(t.is_cuda()));
}

} // namespace

Staged::Staged(const at::Tensor &tensor, bool copy_in) : tensor_(tensor) {
    if (!tensor.is_cuda() && tensor.device().is_cpu() && tensor.is_contiguous()) {
        host_ = tensor;
        return;
    }
    host_ = host_like(tensor);
    if (copy_in)
        host_.copy_(tensor);
}

void Staged::copy_out() {
    if (!host_.is_same(tensor_))
        tensor_.copy_(host_);
}

at::Tensor flatten_to_host(const std::vector<at::Tensor> &tensors) {
    int64_t total = 0;
    for (const at::Tensor &t : tensors)
        total += t.numel();
    const at::Tensor &first = tensors.at(0);
    at::Tensor flat = at::empty({total}, first.options().device(at::kCPU).pinned_memory(first.is_cuda()));
    int64_t offset = 0;
    for (const at::Tensor &t : tensors) {
        flat.narrow(0, offset, t.numel()).copy_(t.reshape({-1}));
        offset += t.numel();
    }
    return flat;
}

void unflatten_from_host(const at::Tensor &flat, std::vector<at::Tensor> &tensors) {
    int64_t offset = 0;
    for (at::Tensor &t : tensors) {
        t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
        offset += t.numel();
    }
}

std::shared_ptr<const DeviceReady> DeviceReady::after_current_streams(const std::vector<at::Tensor> &a,
                                                                      const std::vector<at::Tensor> &b) {
    std::shared_ptr<DeviceReady> ready;
    for (const std::vector<at::Tensor> *list : {&a, &b}) {
        for (const at::Tensor &t : *list) {
            if (!t.defined() || t.device().is_cpu())
                continue;
            if (!ready)
                ready = std::make_shared<DeviceReady>();
            bool seen = false;
            for (const c10::Event &e : ready->events_)
                seen = seen || e.device() == t.device();
            if (seen)
                continue;
            c10::impl::VirtualGuardImpl guard(t.device().type());
            ready->events_.emplace_back(t.device().type());
            ready->events_.back().record(guard.getStream(t.device()));
        }
    }
    return ready;
}

void DeviceReady::finish(const std::vector<at::Tensor> &tensors) {
    std::vector<c10::Device> done;
    for (const at::Tensor &t : tensors) {
        if (!t.defined() || t.device().is_cpu() || std::find(done.begin(), done.end(), t.device()) != done.end())
            continue;
        done.push_back(t.device());
        c10::impl::VirtualGuardImpl guard(t.device().type());
        guard.getStream(t.device()).synchronize();
    }
}

c10::optional<c10::Device> DeviceReady::device_of(const std::vector<at::Tensor> &tensors) {
    for (const at::Tensor &t : tensors)
        if (t.defined() && !t.device().is_cpu())
            return t.device();
    return c10::nullopt;
}

void DeviceReady::wait() const {
    for (const c10::Event &e : events_) {
        c10::impl::VirtualGuardImpl guard(e.device_type());
        e.block(guard.getStream(e.device()));
    }
}

} // namespace torch_ddpd
