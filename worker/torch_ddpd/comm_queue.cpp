#include "comm_queue.hpp"

#include <stdexcept>

namespace torch_ddpd {

namespace {
// The queue whose completion this thread is running, if any: a call posted from there
// may be what the callback is about to wait for.
thread_local const void *completing = nullptr;
} // namespace

CommQueue::CommQueue() : state_(std::make_shared<State>()) {
}

CommQueue::~CommQueue() {
    drain_and_stop();
}

bool CommQueue::start_thread_if_needed(const std::shared_ptr<State> &state) {
    // A thread in a call takes the next one after it; the others are in completions.
    if (state->tasks.empty() || state->idle + state->starting > 0 || state->calling)
        return true;
    try {
        state->threads.emplace_back(run, state);
    } catch (const std::exception &) { // no thread (the process's limit), or no memory to list it
        return false;                  // the calls wait for a thread that is running one's completion
    }
    state->starting++;
    return true;
}

bool CommQueue::post(std::function<void()> call, std::function<void()> complete) {
    bool wake;
    {
        std::lock_guard<std::mutex> lock(state_->mutex);
        if (state_->stopping)
            return false;
        state_->tasks.push_back({std::move(call), std::move(complete)});
        // A thread for it unless one is free: every thread may be in a completion that
        // waits for this very call (posted from there, or by the caller meanwhile).
        if (!start_thread_if_needed(state_) && state_->threads.empty()) {
            state_->tasks.pop_back();
            throw std::runtime_error("ddpd: cannot start a thread for the process group's calls");
        }
        wake = state_->idle > 0;
    }
    if (wake)
        state_->changed.notify_one(); // one takes it: waking them all costs the cores they share
    return true;
}

void CommQueue::drain_and_stop() {
    std::unique_lock<std::mutex> lock(state_->mutex);
    state_->stopping = true;
    if (completing == state_.get())
        start_thread_if_needed(state_); // this thread takes no more calls: another must
    state_->changed.notify_all();
    for (;;) {
        std::vector<std::thread> threads;
        threads.swap(state_->threads); // a completion may still start one
        if (threads.empty())
            return;
        lock.unlock();
        for (std::thread &t : threads) {
            if (t.get_id() == std::this_thread::get_id())
                t.detach(); // ends when the callback that stops the queue returns
            else
                t.join();
        }
        lock.lock();
    }
}

void CommQueue::run(std::shared_ptr<State> state) {
    std::unique_lock<std::mutex> lock(state->mutex);
    state->starting--;
    for (;;) {
        state->idle++;
        state->changed.wait(lock, [&] {
            return (!state->tasks.empty() && !state->calling) || (state->stopping && state->tasks.empty());
        });
        state->idle--;
        if (state->tasks.empty())
            return; // stopping, and nothing is left
        Task task = std::move(state->tasks.front());
        state->tasks.pop_front();
        state->calling = true;
        lock.unlock();
        task.call();
        lock.lock();
        state->calling = false;
        // The next call goes on while this thread completes this one (whose callbacks may
        // wait for that very call): another thread takes it, started if none waits.
        start_thread_if_needed(state);
        bool wake = !state->tasks.empty() && state->idle > 0;
        lock.unlock();
        if (wake)
            state->changed.notify_one();
        completing = state.get();
        task.complete();
        completing = nullptr;
        task = Task{}; // what it held (a Work, tensors) goes before the next wait
        lock.lock();
    }
}

} // namespace torch_ddpd
