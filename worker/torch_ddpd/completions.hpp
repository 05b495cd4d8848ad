// Where a group's Works complete and their futures' callbacks run: off the comm thread, so
// that a callback may wait for a later operation of the same group (PowerSGD's hook does)
// while the comm thread runs it. One thread, in posting order, while callbacks return;
// when every thread is held by a callback, another is started, up to a limit.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace torch_ddpd {

class Completions {
  public:
    Completions();
    ~Completions(); // runs what was posted, then ends the threads
    Completions(const Completions &) = delete;
    Completions &operator=(const Completions &) = delete;

    void post(std::function<void()> task);

  private:
    static constexpr size_t max_threads = 16;
    // Shared with the threads: one of them may be the thread that destroys this (a
    // callback that dropped the group's last reference), and it outlives the object.
    struct Queue {
        std::mutex mutex;
        std::condition_variable posted;
        std::deque<std::function<void()>> tasks;
        size_t idle = 0;
        bool stopping = false;
    };
    static void run(std::shared_ptr<Queue> queue);

    std::shared_ptr<Queue> queue_;
    std::vector<std::thread> threads_; // under queue_->mutex
};

} // namespace torch_ddpd
