#include "comm_thread.hpp"

namespace torch_ddpd {

CommThread::CommThread() : thread_([this] { run(); }) {
}

CommThread::~CommThread() {
    drain_and_stop();
}

bool CommThread::post(std::function<void()> task) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stopping_)
            return false;
        tasks_.push_back(std::move(task));
    }
    posted_.notify_one();
    return true;
}

void CommThread::drain_and_stop() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    posted_.notify_one();
    if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id())
        thread_.join();
}

void CommThread::run() {
    for (;;) {
        std::function<void()> task;
        {
            std::unique_lock<std::mutex> lock(mutex_);
            posted_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
            if (tasks_.empty())
                return; // stopping, and nothing is left
            task = std::move(tasks_.front());
            tasks_.pop_front();
        }
        task(); // without the lock: post may be called meanwhile
    }
}

} // namespace torch_ddpd
