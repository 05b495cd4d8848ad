#include "process_group.hpp"

#include <Python.h>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

#include <ATen/MemoryOverlap.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>

#include "ddp_types.hpp"
#include "staging.hpp"
#include "work.hpp"

namespace torch_ddpd {

namespace {

// The groups still open, for shutdown_all at exit (torch keeps the default group in a
// global that may never be destroyed). Weak references: shutdown_all holds a group
// while it shuts it down, so that its last reference, dropped meanwhile (by a callback
// on the group's own comm thread, which shutdown_all waits for), cannot shut it down
// at once; and a group whose last reference has gone shuts itself down, never both.
// The lock guards the map only: nothing waits while holding it.
std::mutex open_groups_mutex;
std::map<const ProcessGroup *, c10::weak_intrusive_ptr<ProcessGroup>> open_groups;
// Groups whose last reference went, closing on the thread that dropped it: shutdown_all
// waits for them too (a rank's leave, and a thread still in libddp, before Python ends).
size_t groups_closing = 0;
std::condition_variable groups_closed;
int groups_created = 0;

const size_t max_job_name = 64; // bytes, as ddpd takes them

// The job a group joins, as its rank 0 names it in torch's store for that group: the
// world's first group is the job ddp-run (or DDP_JOB) names; any other (dist.new_group,
// or a subgroup of a world whose default group is another backend's) gets a name of its
// own, unique however many such groups the world's processes create at once.
const std::string job_key = "torch_ddpd/job";

std::string job_name(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size, int index) {
    const std::string &key = job_key;
    if (rank != 0) {
        std::vector<uint8_t> value = store->get(key);
        return std::string(value.begin(), value.end());
    }
    const char *env = getenv("DDP_JOB");
    std::string name = env && *env ? env : "default";
    const char *world = getenv("WORLD_SIZE");
    if (index > 0 || !world || atoi(world) != size) {
        char tail[32];
        snprintf(tail, sizeof(tail), ".g%d.%08x", index, (unsigned)std::random_device{}());
        name = name.substr(0, max_job_name - strlen(tail)) + tail;
    }
    store->set(key, std::vector<uint8_t>(name.begin(), name.end()));
    return name;
}

// Refused before anything is posted: on the comm thread it would end the job for all.
void check_dense(const at::Tensor &t, const char *operation) {
    TORCH_CHECK(t.layout() == at::kStrided, "ddpd: ", operation, ": ", t.layout(),
                " tensors are not supported, only dense ones");
}

void check_same(const std::vector<at::Tensor> &tensors, const char *operation) {
    TORCH_CHECK(!tensors.empty(), "ddpd: ", operation, " needs at least one tensor");
    for (const at::Tensor &t : tensors) {
        check_dense(t, operation);
        TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(), "ddpd: ", operation, ": the tensors differ in type (",
                    t.scalar_type(), " and ", tensors[0].scalar_type(), ")");
        TORCH_CHECK(t.numel() == tensors[0].numel(), "ddpd: ", operation, ": the tensors differ in size (", t.numel(),
                    " and ", tensors[0].numel(), " elements)");
    }
}

void check_one(const std::vector<at::Tensor> &tensors, const char *operation) {
    TORCH_CHECK(tensors.size() == 1, "ddpd: ", operation, " takes one tensor per rank, not ", tensors.size());
    check_same(tensors, operation);
}

void check_root(int64_t root, int size, const char *operation) {
    TORCH_CHECK(root >= 0 && root < size, "ddpd: ", operation, ": root ", root, " is not a rank of this group of ",
                size);
}

// As libddp would refuse them, but before anything is posted (see check_dense).
void check_peer(int64_t peer, int self, int tag, const char *operation) {
    TORCH_CHECK(peer != self, "ddpd: ", operation, ": rank ", self, " cannot ", operation, " to or from itself");
    TORCH_CHECK(tag >= 0, "ddpd: ", operation, ": tag ", tag, " is negative (negative tags are reserved)");
}

// Combines a rank's several tensors into one before the all-reduce (gloo's meaning of
// a list: one result over every tensor of every rank).
at::Tensor combine(const std::vector<at::Tensor> &tensors, c10d::ReduceOp::RedOpType op) {
    at::Tensor acc = tensors[0].to(at::kCPU).contiguous().clone();
    for (size_t i = 1; i < tensors.size(); i++) {
        at::Tensor t = tensors[i].to(at::kCPU).reshape(acc.sizes()); // same count, any shape
        switch (op) {
        case c10d::ReduceOp::PRODUCT:
            acc.mul_(t);
            break;
        case c10d::ReduceOp::MIN:
            acc = at::minimum(acc, t);
            break;
        case c10d::ReduceOp::MAX:
            acc = at::maximum(acc, t);
            break;
        default: // SUM, AVG
            acc.add_(t);
        }
    }
    return acc;
}

// Whether a call's input must be read from a copy: in place (or overlapping otherwise), the
// call would send parts that it had already written over (libddp's buffers must not
// overlap). Off the CPU, Staged copies it anyway.
bool reads_over_itself(const at::Tensor &input, const at::Tensor &output) {
    return at::get_overlap_status(input, output) != at::MemOverlapStatus::No && input.device().is_cpu();
}

} // namespace

c10::intrusive_ptr<c10d::ProcessGroup> ProcessGroup::create(const c10::intrusive_ptr<c10d::Store> &store, int rank,
                                                            int size, std::chrono::milliseconds timeout) {
    int index;
    {
        std::lock_guard<std::mutex> lock(open_groups_mutex);
        index = groups_created++;
    }
    pybind11::gil_scoped_release no_gil; // the store and the join wait for the other ranks
    std::string job = job_name(store, rank, size, index);
    ddp_options opts;
    ddp_options_init(&opts); // (C++ has no designated initialisers for DDP_OPTIONS_INIT)
    opts.job = job.c_str();
    opts.rank = rank;
    opts.world_size = size;
    opts.timeout_ms = timeout.count() <= 0 || timeout.count() > INT_MAX ? INT_MAX : (int)timeout.count();
    ddp_group *group = nullptr;
    int r = ddp_init(&opts, &group);
    TORCH_CHECK(r == 0, "ddpd: cannot join job '", job, "' as rank ", rank, " of ", size, ": ",
                ddp_last_error(nullptr));
    // Every rank has read the name (the job formed): it goes, so that a group made again
    // on the same store (destroy_process_group resets torch's group prefixes; torchrun's
    // store outlives a restart) waits for its new name instead of joining the old job.
    if (rank == 0) {
        try {
            store->deleteKey(job_key);
        } catch (const std::exception &) {
            // a store without deleteKey: a group made again on it may join the old name
        }
    }
    auto pg = c10::make_intrusive<ProcessGroup>(group, rank, size);
    std::lock_guard<std::mutex> lock(open_groups_mutex);
    open_groups.emplace(pg.get(), c10::weak_intrusive_ptr<ProcessGroup>(pg));
    return pg;
}

void ProcessGroup::shutdown_all() {
    std::vector<c10::intrusive_ptr<ProcessGroup>> groups;
    std::vector<const ProcessGroup *> closing; // last reference gone: each closes itself, and leaves the map
    {
        std::lock_guard<std::mutex> lock(open_groups_mutex);
        for (auto entry = open_groups.begin(); entry != open_groups.end();)
            if (auto g = entry->second.lock()) {
                groups.push_back(std::move(g));
                entry = open_groups.erase(entry);
            } else
                closing.push_back((entry++)->first);
    }
    for (auto &g : groups)
        g->shutdown();
    groups.clear(); // a last reference dropped here closes its group now, on this thread
    // Their calls end by their timeouts.
    std::unique_lock<std::mutex> lock(open_groups_mutex);
    groups_closed.wait(lock, [&] {
        for (const ProcessGroup *g : closing)
            if (open_groups.count(g))
                return false; // its close has not begun
        return groups_closing == 0;
    });
}

ProcessGroup::ProcessGroup(ddp_group *group, int rank, int size)
    : c10d::ProcessGroup(rank, size), group_(group), queue_(new CommQueue()) {
}

// The last reference went while open_groups held a weak one (the object itself goes
// once this returns: see close).
void ProcessGroup::release_resources() {
    close();
}

ProcessGroup::~ProcessGroup() {
    close(); // done already, unless the group was never in open_groups or shutdown_all ran
}

void ProcessGroup::close() {
    // What is still queued may complete futures whose callbacks take the GIL.
    std::unique_ptr<pybind11::gil_scoped_release> no_gil;
    if (Py_IsInitialized() && PyGILState_Check())
        no_gil.reset(new pybind11::gil_scoped_release());
    {
        std::lock_guard<std::mutex> lock(open_groups_mutex);
        open_groups.erase(this); // and counted as closing at once: shutdown_all sees one or the other
        groups_closing++;
    }
    shutdown();
    std::lock_guard<std::mutex> lock(open_groups_mutex);
    if (--groups_closing == 0)
        groups_closed.notify_all();
}

// By one thread at a time (the one that holds the last reference, or shutdown_all, which
// holds one), without the GIL.
void ProcessGroup::shutdown() {
    if (!queue_)
        return;
    queue_->drain_and_stop(); // runs and completes what was posted; a later post is refused
    queue_.reset();
    ddp_finalize(group_);
    group_ = nullptr;
}

void ProcessGroup::check(int r) const {
    if (r >= 0)
        return;
    const char *why = ddp_last_error(group_);
    throw LibddpError(why && *why ? why : ddp_strerror(r));
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::post(c10d::OpType type, const char *title, std::vector<at::Tensor> outputs,
                                                  std::function<void()> body, const std::vector<at::Tensor> &inputs,
                                                  int from, int tag) {
    // Refused here, not on the comm thread, where only this rank would see it fail.
    for (const at::Tensor &t : outputs)
        TORCH_CHECK(type == c10d::OpType::SEND || at::has_internal_overlap(t) != at::MemOverlap::Yes, title,
                    ": cannot write a tensor whose elements share memory (an expanded view); pass a copy");
    auto work = c10::make_intrusive<Work>(getRank(), type, title, outputs);
    std::shared_ptr<const DeviceReady> ready = DeviceReady::after_current_streams(outputs, inputs);
    c10::optional<c10::Device> device = DeviceReady::device_of(outputs);
    if (!device)
        device = DeviceReady::device_of(inputs);
    auto error = std::make_shared<std::exception_ptr>();
    auto call = [this, ready, device, outputs, title, error, body = std::move(body)] {
        try {
            at::NoGradGuard no_grad; // copies into the caller's tensors are not autograd's
            c10::OptionalDeviceGuard on(device);
            if (ready)
                ready->wait();
            body();
            if (device)
                DeviceReady::finish(outputs);
            ddp_report_progress(group_, ++calls_, 0.0); // ddpctl status: how many calls each rank has done
        } catch (const LibddpError &e) {
            // A timeout is this rank's news only: a caller that catches it and goes on
            // would leave the others waiting out their own. The group cannot go on (libddp
            // fails every later call), so the job ends here for every rank.
            if (ddp_job_status(group_) == 0)
                ddp_abort(
                    group_,
                    (std::string(title) + " failed on rank " + std::to_string(getRank()) + ": " + e.what()).c_str());
            *error = std::current_exception();
        } catch (const std::exception &e) {
            // torch failed here, around libddp: the other ranks would wait for this one
            auto *torch_error = dynamic_cast<const c10::Error *>(&e);
            std::string why = std::string(title) + " failed on rank " + std::to_string(getRank()) + ": " +
                              (torch_error ? torch_error->what_without_backtrace() : e.what());
            ddp_abort(group_, why.c_str());
            *error = std::current_exception();
        }
    };
    auto complete = [work, error, device] {
        c10::OptionalDeviceGuard on(device); // a callback (a DDP comm hook) allocates on the call's GPU
        *error ? work->fail(*error) : work->complete();
    };
    bool posted;
    if (from >= 0) {
        ddp_group *group = group_;
        auto ready = [group, from, tag] { return ddp_probe(group, from, tag) != 0; }; // an error: the recv says it
        int64_t key = ((int64_t)from << 32) | (uint32_t)tag;
        posted = queue_ && queue_->post_receive(std::move(call), std::move(complete), std::move(ready), key,
                                                std::chrono::milliseconds(ddp_timeout_ms(group_)));
    } else
        posted = queue_ && queue_->post(std::move(call), std::move(complete));
    TORCH_CHECK(posted, "ddpd: ", title, " on a process group that was shut down");
    return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::broadcast(std::vector<at::Tensor> &tensors,
                                                       const c10d::BroadcastOptions &opts) {
    check_same(tensors, "broadcast");
    check_root(opts.rootRank, getSize(), "broadcast");
    TORCH_CHECK(opts.rootTensor >= 0 && opts.rootTensor < (int64_t)tensors.size(), "ddpd: broadcast: root tensor ",
                opts.rootTensor, " is not in the list of ", tensors.size());
    int root = (int)opts.rootRank;
    size_t which = (size_t)opts.rootTensor;
    // The copies into the list's other tensors would fail on the comm thread (see check_dense).
    for (const at::Tensor &t : tensors) {
        TORCH_CHECK(t.sizes() == tensors[which].sizes(), "ddpd: broadcast: the tensors differ in shape (", t.sizes(),
                    " and ", tensors[which].sizes(), ")");
        TORCH_CHECK(at::get_overlap_status(t, tensors[which]) != at::MemOverlapStatus::Partial,
                    "ddpd: broadcast: the tensors partly share memory; pass copies");
    }
    return post(c10d::OpType::BROADCAST, "ddpd:broadcast", tensors, [this, tensors, root, which] {
        Staged s(tensors[which], getRank() == root);
        Elements e = movement_elements(tensors[which]);
        check(ddp_broadcast(group_, s.data(), e.count, e.dtype, root));
        s.copy_out();
        for (size_t i = 0; i < tensors.size(); i++)
            if (i != which)
                tensors[i].copy_(tensors[which]);
    });
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::allreduce(std::vector<at::Tensor> &tensors,
                                                       const c10d::AllreduceOptions &opts) {
    check_same(tensors, "allreduce");
    c10d::ReduceOp::RedOpType op = opts.reduceOp;
    Elements e = reduction_elements(tensors[0], &op, "allreduce");
    ddp_op dop = reduce_op(op, "allreduce");
    return post(c10d::OpType::ALLREDUCE, "ddpd:allreduce", tensors, [this, tensors, op, dop, e] {
        if (tensors.size() == 1) {
            Staged s(tensors[0]);
            check(ddp_all_reduce(group_, s.data(), e.count, e.dtype, dop));
            s.copy_out();
            return;
        }
        at::Tensor acc = combine(tensors, op);
        bool avg = op == c10d::ReduceOp::AVG;
        check(ddp_all_reduce(group_, acc.data_ptr(), e.count, e.dtype, avg ? DDP_SUM : dop));
        if (avg)
            acc.div_((double)getSize() * (double)tensors.size());
        for (const at::Tensor &t : tensors)
            t.copy_(acc.view(t.sizes()));
    });
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::allreduce_coalesced(std::vector<at::Tensor> &tensors,
                                                                 const c10d::AllreduceCoalescedOptions &opts) {
    TORCH_CHECK(!tensors.empty(), "ddpd: allreduce_coalesced needs at least one tensor");
    c10d::ReduceOp::RedOpType op = opts.reduceOp;
    for (const at::Tensor &t : tensors) {
        check_dense(t, "allreduce_coalesced");
        TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(),
                    "ddpd: allreduce_coalesced: the tensors differ in type (", t.scalar_type(), " and ",
                    tensors[0].scalar_type(), ")");
    }
    ddp_dtype dtype = reduction_elements(tensors[0], &op, "allreduce_coalesced").dtype;
    ddp_op dop = reduce_op(op, "allreduce_coalesced");
    return post(c10d::OpType::ALLREDUCE_COALESCED, "ddpd:allreduce_coalesced", tensors, [this, tensors, dtype, dop] {
        at::Tensor flat = flatten_to_host(tensors); // one call for all: latency is paid once
        check(ddp_all_reduce(group_, flat.data_ptr(), (size_t)flat.numel(), dtype, dop));
        std::vector<at::Tensor> out = tensors;
        unflatten_from_host(flat, out);
    });
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::reduce(std::vector<at::Tensor> &tensors, const c10d::ReduceOptions &opts) {
    check_one(tensors, "reduce");
    check_root(opts.rootRank, getSize(), "reduce");
    c10d::ReduceOp::RedOpType op = opts.reduceOp;
    Elements e = reduction_elements(tensors[0], &op, "reduce");
    ddp_op dop = reduce_op(op, "reduce");
    int root = (int)opts.rootRank;
    return post(c10d::OpType::REDUCE, "ddpd:reduce", tensors, [this, tensors, dop, e, root] {
        Staged s(tensors[0]);
        check(ddp_reduce(group_, s.data(), e.count, e.dtype, dop, root));
        if (getRank() == root)
            s.copy_out();
    });
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                                       std::vector<at::Tensor> &inputs,
                                                       const c10d::AllgatherOptions &) {
    check_one(inputs, "allgather");
    TORCH_CHECK(outputs.size() == 1 && outputs[0].size() == (size_t)getSize(),
                "ddpd: allgather needs one output list of ", getSize(), " tensors");
    std::vector<at::Tensor> both = outputs[0];
    both.push_back(inputs[0]);
    check_same(both, "allgather");
    std::vector<at::Tensor> out = outputs[0];
    at::Tensor in = inputs[0];
    return post(c10d::OpType::ALLGATHER, "ddpd:allgather", out,
                [this, out, in]() mutable {
                    Staged s(in);
                    Elements e = movement_elements(in);
                    at::Tensor flat = at::empty({getSize() * in.numel()}, in.options().device(at::kCPU));
                    check(ddp_all_gather(group_, s.data(), flat.data_ptr(), e.count, e.dtype));
                    unflatten_from_host(flat, out);
                },
                {in});
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::_allgather_base(at::Tensor &output, at::Tensor &input,
                                                             const c10d::AllgatherOptions &) {
    check_dense(input, "_allgather_base");
    check_dense(output, "_allgather_base");
    TORCH_CHECK(output.scalar_type() == input.scalar_type() && output.numel() == getSize() * input.numel(),
                "ddpd: _allgather_base: the output must hold world size (", getSize(), ") times the input's ",
                input.numel(), " elements of ", input.scalar_type());
    bool stage_input = reads_over_itself(input, output);
    return post(c10d::OpType::_ALLGATHER_BASE, "ddpd:_allgather_base", {output},
                [this, output, input, stage_input] {
                    Staged in(stage_input ? input.clone(at::MemoryFormat::Contiguous) : input), out(output, false);
                    Elements e = movement_elements(input);
                    check(ddp_all_gather(group_, in.data(), out.data(), e.count, e.dtype));
                    out.copy_out();
                },
                {input});
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::gather(std::vector<std::vector<at::Tensor>> &outputs,
                                                    std::vector<at::Tensor> &inputs, const c10d::GatherOptions &opts) {
    check_one(inputs, "gather");
    check_root(opts.rootRank, getSize(), "gather");
    int root = (int)opts.rootRank;
    std::vector<at::Tensor> out;
    if (getRank() == root) {
        TORCH_CHECK(outputs.size() == 1 && outputs[0].size() == (size_t)getSize(),
                    "ddpd: gather needs one output list of ", getSize(), " tensors on the root");
        out = outputs[0];
        std::vector<at::Tensor> both = out;
        both.push_back(inputs[0]);
        check_same(both, "gather");
    } else {
        TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                    "ddpd: gather: only the root gives an output list");
    }
    at::Tensor in = inputs[0];
    return post(
        c10d::OpType::GATHER, "ddpd:gather", out,
        [this, out, in, root]() mutable {
            Staged s(in);
            Elements e = movement_elements(in);
            at::Tensor flat;
            if (getRank() == root)
                flat = at::empty({getSize() * in.numel()}, in.options().device(at::kCPU));
            check(ddp_gather(group_, s.data(), flat.defined() ? flat.data_ptr() : nullptr, e.count, e.dtype, root));
            if (flat.defined())
                unflatten_from_host(flat, out);
        },
        {in});
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::scatter(std::vector<at::Tensor> &outputs,
                                                     std::vector<std::vector<at::Tensor>> &inputs,
                                                     const c10d::ScatterOptions &opts) {
    check_one(outputs, "scatter");
    check_root(opts.rootRank, getSize(), "scatter");
    int root = (int)opts.rootRank;
    std::vector<at::Tensor> in;
    if (getRank() == root) {
        TORCH_CHECK(inputs.size() == 1 && inputs[0].size() == (size_t)getSize(),
                    "ddpd: scatter needs one input list of ", getSize(), " tensors on the root");
        in = inputs[0];
        std::vector<at::Tensor> both = in;
        both.push_back(outputs[0]);
        check_same(both, "scatter");
    } else {
        TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                    "ddpd: scatter: only the root gives an input list");
    }
    at::Tensor out = outputs[0];
    return post(
        c10d::OpType::SCATTER, "ddpd:scatter", {out},
        [this, out, in, root] {
            Staged s(out, false);
            Elements e = movement_elements(out);
            at::Tensor flat = in.empty() ? at::Tensor() : flatten_to_host(in);
            check(ddp_scatter(group_, flat.defined() ? flat.data_ptr() : nullptr, s.data(), e.count, e.dtype, root));
            s.copy_out();
        },
        in);
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::reduce_scatter(std::vector<at::Tensor> &outputs,
                                                            std::vector<std::vector<at::Tensor>> &inputs,
                                                            const c10d::ReduceScatterOptions &opts) {
    check_one(outputs, "reduce_scatter");
    TORCH_CHECK(inputs.size() == 1 && inputs[0].size() == (size_t)getSize(),
                "ddpd: reduce_scatter needs one input list of ", getSize(), " tensors");
    std::vector<at::Tensor> both = inputs[0];
    both.push_back(outputs[0]);
    check_same(both, "reduce_scatter");
    c10d::ReduceOp::RedOpType op = opts.reduceOp;
    Elements e = reduction_elements(outputs[0], &op, "reduce_scatter");
    ddp_op dop = reduce_op(op, "reduce_scatter");
    at::Tensor out = outputs[0];
    std::vector<at::Tensor> in = inputs[0];
    return post(
        c10d::OpType::REDUCE_SCATTER, "ddpd:reduce_scatter", {out},
        [this, out, in, e, dop] {
            Staged s(out, false);
            at::Tensor flat = flatten_to_host(in);
            check(ddp_reduce_scatter(group_, flat.data_ptr(), s.data(), e.count, e.dtype, dop));
            s.copy_out();
        },
        in);
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::_reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                                                                  const c10d::ReduceScatterOptions &opts) {
    check_dense(input, "_reduce_scatter_base");
    check_dense(output, "_reduce_scatter_base");
    TORCH_CHECK(output.scalar_type() == input.scalar_type() && input.numel() == getSize() * output.numel(),
                "ddpd: _reduce_scatter_base: the input must hold world size (", getSize(), ") times the output's ",
                output.numel(), " elements of ", output.scalar_type());
    c10d::ReduceOp::RedOpType op = opts.reduceOp;
    Elements e = reduction_elements(output, &op, "_reduce_scatter_base");
    ddp_op dop = reduce_op(op, "_reduce_scatter_base");
    bool stage_input = reads_over_itself(input, output);
    return post(c10d::OpType::_REDUCE_SCATTER_BASE, "ddpd:_reduce_scatter_base", {output},
                [this, output, input, e, dop, stage_input] {
                    Staged in(stage_input ? input.clone(at::MemoryFormat::Contiguous) : input), out(output, false);
                    check(ddp_reduce_scatter(group_, in.data(), out.data(), e.count, e.dtype, dop));
                    out.copy_out();
                },
                {input});
}

// An all-to-all of equal parts as world scatters: rank r's turn sends its part j to rank j,
// which keeps it as its part r. (libddp has no uneven all-to-all.)
void ProcessGroup::scatter_rounds(const void *send, void *recv, size_t count, ddp_dtype dtype) const {
    size_t part_bytes = count * element_bytes(dtype);
    for (int r = 0; r < getSize(); r++)
        check(ddp_scatter(group_, getRank() == r ? send : nullptr, (char *)recv + (size_t)r * part_bytes, count, dtype,
                          r));
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::alltoall_base(at::Tensor &output, at::Tensor &input,
                                                           std::vector<int64_t> &output_splits,
                                                           std::vector<int64_t> &input_splits,
                                                           const c10d::AllToAllOptions &) {
    auto even = [this](const std::vector<int64_t> &splits, const at::Tensor &t) {
        if (splits.empty())
            return t.size(0) % getSize() == 0;
        for (int64_t s : splits)
            if (s != splits[0])
                return false;
        return (int)splits.size() == getSize() && splits[0] * getSize() == t.size(0);
    };
    auto add_up = [](const std::vector<int64_t> &splits, const at::Tensor &t, const char *which) {
        int64_t sum = 0;
        for (int64_t s : splits)
            sum += s;
        TORCH_CHECK(splits.empty() || (t.dim() > 0 && sum == t.size(0)), "ddpd: all_to_all_single: the ", which,
                    " splits add up to ", sum, ", not the tensor's first dimension");
    };
    check_dense(input, "all_to_all_single");
    check_dense(output, "all_to_all_single");
    add_up(input_splits, input, "input");
    add_up(output_splits, output, "output");
    TORCH_CHECK(input.dim() > 0 && output.dim() > 0 && even(input_splits, input) && even(output_splits, output) &&
                    input.numel() == output.numel() && input.scalar_type() == output.scalar_type(),
                "ddpd: all_to_all_single with uneven splits is not supported: libddp moves equal parts only");
    bool stage_input = reads_over_itself(input, output);
    return post(c10d::OpType::ALLTOALL_BASE, "ddpd:alltoall_base", {output},
                [this, output, input, stage_input] {
                    Staged in(stage_input ? input.clone(at::MemoryFormat::Contiguous) : input), out(output, false);
                    Elements e = movement_elements(input);
                    scatter_rounds(in.data(), out.data(), e.count / (size_t)getSize(), e.dtype);
                    out.copy_out();
                },
                {input});
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::alltoall(std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
                                                      const c10d::AllToAllOptions &) {
    TORCH_CHECK(outputs.size() == (size_t)getSize() && inputs.size() == (size_t)getSize(), "ddpd: all_to_all needs ",
                getSize(), " input and output tensors");
    std::vector<at::Tensor> all = inputs;
    all.insert(all.end(), outputs.begin(), outputs.end());
    for (const at::Tensor &t : all)
        check_dense(t, "all_to_all");
    TORCH_CHECK(
        [&] {
            for (const at::Tensor &t : all)
                if (t.numel() != all[0].numel() || t.scalar_type() != all[0].scalar_type())
                    return false;
            return true;
        }(),
        "ddpd: all_to_all with tensors of different sizes is not supported: libddp moves equal parts only");
    return post(
        c10d::OpType::ALLTOALL, "ddpd:alltoall", outputs,
        [this, outputs, inputs]() mutable {
            at::Tensor in = flatten_to_host(inputs);
            at::Tensor out = at::empty_like(in);
            Elements e = movement_elements(in);
            scatter_rounds(in.data_ptr(), out.data_ptr(), e.count / (size_t)getSize(), e.dtype);
            unflatten_from_host(out, outputs);
        },
        inputs);
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::send(std::vector<at::Tensor> &tensors, int dst, int tag) {
    check_one(tensors, "send");
    check_root(dst, getSize(), "send");
    check_peer(dst, getRank(), tag, "send");
    at::Tensor t = tensors[0];
    return post(c10d::OpType::SEND, "ddpd:send", tensors, [this, t, dst, tag] {
        Staged s(t);
        Elements e = movement_elements(t);
        check(ddp_send(group_, s.data(), e.count, e.dtype, dst, tag));
    });
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::recv(std::vector<at::Tensor> &tensors, int src, int tag) {
    check_one(tensors, "recv");
    check_root(src, getSize(), "recv");
    check_peer(src, getRank(), tag, "recv");
    at::Tensor t = tensors[0];
    return post(
        c10d::OpType::RECV, "ddpd:recv", tensors,
        [this, t, src, tag] {
            Staged s(t, false);
            Elements e = movement_elements(t);
            check(ddp_recv(group_, s.data(), e.count, e.dtype, src, tag));
            s.copy_out();
        },
        {}, src, tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::recvAnysource(std::vector<at::Tensor> &, int) {
    TORCH_CHECK(false, "ddpd: recv from any source is not supported: libddp matches a recv by its source; "
                       "pass src");
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::barrier(const c10d::BarrierOptions &) {
    return post(c10d::OpType::BARRIER, "ddpd:barrier", {}, [this] { check(ddp_barrier(group_)); });
}

} // namespace torch_ddpd
