// Where a process group's calls run: in the order they were posted, which is the order
// every rank posts them in, so that the ranks' collectives match, and one at a time (a
// ddp_group is used by one thread at a time). Each task is a libddp call and then its
// completion (the Work's future, whose callbacks run there). The thread that made the
// call completes it, at once, as the fast path; but a callback may wait for a later call
// of the same group (PowerSGD's hook does), so the calls are not held up behind a
// completion: when a call is posted, or is waiting when a call ends, and no thread is free
// to take it (waiting, or about to), another is started. Without a cap: each completion
// that waits holds a thread, and a cap would leave the call it waits for with none (as
// many threads as completions at once, and one more; they stay for the group's next burst).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace torch_ddpd {

class CommQueue {
  public:
    CommQueue();
    ~CommQueue(); // drain_and_stop
    CommQueue(const CommQueue &) = delete;
    CommQueue &operator=(const CommQueue &) = delete;

    // false once drain_and_stop has begun: nothing will run.
    bool post(std::function<void()> call, std::function<void()> complete);
    // Waits until everything posted so far has run and completed; then nothing more may
    // be posted. From one of the queue's own threads (a callback that dropped the group's
    // last reference) it waits for the others and leaves its own to end by itself.
    void drain_and_stop();

  private:
    struct Task {
        std::function<void()> call, complete;
    };
    // Shared with the threads, which may outlive the object (see drain_and_stop).
    struct State {
        std::mutex mutex;
        std::condition_variable changed;
        std::deque<Task> tasks;
        bool calling = false; // a thread is in a task's call
        size_t idle = 0;      // threads waiting for a task
        size_t starting = 0;  // threads started that have not yet waited: as good as idle
        bool stopping = false;
        std::vector<std::thread> threads;
    };
    static void run(std::shared_ptr<State> state);
    // Under the state's mutex: a thread for the next call if none is free to take it.
    // false when one was needed and none could be made (the process's thread limit).
    static bool start_thread_if_needed(const std::shared_ptr<State> &state);

    std::shared_ptr<State> state_;
};

} // namespace torch_ddpd
