#include "completions.hpp"

namespace torch_ddpd {

Completions::Completions() : queue_(std::make_shared<Queue>()) {
}

Completions::~Completions() {
    std::vector<std::thread> threads;
    {
        std::lock_guard<std::mutex> lock(queue_->mutex);
        queue_->stopping = true;
        threads.swap(threads_);
    }
    queue_->posted.notify_all();
    for (std::thread &t : threads) {
        if (t.get_id() == std::this_thread::get_id())
            t.detach(); // ends when the callback that destroys this returns
        else
            t.join();
    }
}

void Completions::post(std::function<void()> task) {
    {
        std::lock_guard<std::mutex> lock(queue_->mutex);
        queue_->tasks.push_back(std::move(task));
        // Waiting threads take what is queued; when too few wait, the others are in
        // callbacks that may be waiting for this very completion.
        if (queue_->idle < queue_->tasks.size() && threads_.size() < max_threads)
            threads_.emplace_back(run, queue_);
    }
    queue_->posted.notify_one();
}

void Completions::run(std::shared_ptr<Queue> queue) {
    std::unique_lock<std::mutex> lock(queue->mutex);
    for (;;) {
        queue->idle++;
        queue->posted.wait(lock, [&] { return queue->stopping || !queue->tasks.empty(); });
        queue->idle--;
        if (queue->tasks.empty())
            return; // stopping, and nothing is left
        std::function<void()> task = std::move(queue->tasks.front());
        queue->tasks.pop_front();
        lock.unlock();
        task();
        task = nullptr; // what it held (a Work, tensors) goes before the next wait
        lock.lock();
    }
}

} // namespace torch_ddpd
