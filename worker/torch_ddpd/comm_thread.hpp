// The one thread that calls libddp for a process group (a ddp_group is used by one thread
// at a time): operations run in the order they were posted, which is the order every rank
// posts them in, so that the ranks' collectives match.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace torch_ddpd {

class CommThread {
  public:
    CommThread();
    ~CommThread(); // runs what was posted, then ends the thread
    CommThread(const CommThread &) = delete;
    CommThread &operator=(const CommThread &) = delete;

    // false once drain_and_stop has begun: the task will not run.
    bool post(std::function<void()> task);
    // Waits until everything posted so far has run; then nothing more may be posted.
    void drain_and_stop();

  private:
    void run();

    std::mutex mutex_;
    std::condition_variable posted_;
    std::deque<std::function<void()>> tasks_;
    bool stopping_ = false;
    std::thread thread_;
};

} // namespace torch_ddpd
