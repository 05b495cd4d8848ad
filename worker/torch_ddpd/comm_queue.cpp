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
    if ((state->tasks.empty() && state->set_aside.empty()) || state->idle + state->starting > 0 || state->calling)
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
    Task task;
    task.call = std::move(call);
    task.complete = std::move(complete);
    return post_task(std::move(task));
}

bool CommQueue::post_receive(std::function<void()> call, std::function<void()> complete, std::function<bool()> ready,
                             int64_t key, std::chrono::milliseconds wait) {
    Task task;
    task.call = std::move(call);
    task.complete = std::move(complete);
    task.ready = std::move(ready);
    task.key = key;
    task.until = std::chrono::steady_clock::now() + wait;
    return post_task(std::move(task));
}

bool CommQueue::post_task(Task task) {
    bool wake;
    {
        std::lock_guard<std::mutex> lock(state_->mutex);
        if (state_->stopping)
            return false;
        state_->tasks.push_back(std::move(task));
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

bool CommQueue::next_task(const std::shared_ptr<State> &state, std::unique_lock<std::mutex> &lock, Task *ret) {
    // The probes are libddp calls: made while this thread holds the group (calling), off
    // the lock; only this thread changes set_aside meanwhile (post adds to tasks only).
    std::vector<int64_t> waiting; // keys of receives set aside whose message has not come
    auto looks_ready = [&](const Task &t) {
        for (int64_t k : waiting)
            if (k == t.key)
                return false; // an earlier receive of its source and tag comes first
        bool go = std::chrono::steady_clock::now() >= t.until || t.ready();
        if (!go)
            waiting.push_back(t.key);
        return go;
    };
    size_t n = state->set_aside.size();
    lock.unlock();
    for (size_t i = 0; i < n; i++)
        if (looks_ready(state->set_aside[i])) {
            lock.lock();
            *ret = std::move(state->set_aside[i]);
            state->set_aside.erase(state->set_aside.begin() + (std::ptrdiff_t)i);
            return true;
        }
    lock.lock();
    while (!state->tasks.empty()) {
        Task task = std::move(state->tasks.front());
        state->tasks.pop_front();
        if (!task.ready) {
            *ret = std::move(task);
            return true;
        }
        lock.unlock();
        bool go = looks_ready(task);
        lock.lock();
        if (go) {
            *ret = std::move(task);
            return true;
        }
        state->set_aside.push_back(std::move(task));
    }
    return false;
}

void CommQueue::run(std::shared_ptr<State> state) {
    std::unique_lock<std::mutex> lock(state->mutex);
    state->starting--;
    for (;;) {
        state->idle++;
        auto done = [&] { return state->stopping && state->tasks.empty() && state->set_aside.empty(); };
        auto can_call = [&] { return !state->tasks.empty() && !state->calling; };
        if (state->set_aside.empty() || state->calling)
            state->changed.wait(lock,
                                [&] { return can_call() || done() || (!state->set_aside.empty() && !state->calling); });
        else /* a receive set aside: looked at again every millisecond */
            state->changed.wait_for(lock, std::chrono::milliseconds(1), [&] { return can_call() || done(); });
        state->idle--;
        if (done())
            return; // stopping, and nothing is left
        if (state->calling)
            continue;
        state->calling = true;
        Task task;
        if (!next_task(state, lock, &task)) {
            state->calling = false;
            continue;
        }
        lock.unlock();
        task.call();
        lock.lock();
        state->calling = false;
        // The next call goes on while this thread completes this one (whose callbacks may
        // wait for that very call): another thread takes it, started if none waits.
        start_thread_if_needed(state);
        bool wake = (!state->tasks.empty() || !state->set_aside.empty()) && state->idle > 0;
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
