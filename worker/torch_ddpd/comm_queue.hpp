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
//
// A receive is the exception to the order (as gloo's, which run apart from the collectives):
// one whose message has not come yet is set aside, and the calls after it go on, so that
// two ranks that each post a recv before their send, or a recv before a collective the
// peer makes first, do not wait on each other. Set aside, it is looked at again between
// calls and every millisecond; the receives of one source and tag keep their order, and
// one whose message has not come within its time runs all the same (and times out there).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
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
    // A receive: ready() says whether its message has come (called where calls run); key
    // names its source and tag; after wait it runs whether or not.
    bool post_receive(std::function<void()> call, std::function<void()> complete, std::function<bool()> ready,
                      int64_t key, std::chrono::milliseconds wait);
    // Waits until everything posted so far has run and completed; then nothing more may
    // be posted. From one of the queue's own threads (a callback that dropped the group's
    // last reference) it waits for the others and leaves its own to end by itself.
    void drain_and_stop();

  private:
    struct Task {
        std::function<void()> call, complete;
        std::function<bool()> ready; // a receive's; empty for any other call
        int64_t key = -1;
        std::chrono::steady_clock::time_point until;
    };
    // Shared with the threads, which may outlive the object (see drain_and_stop).
    struct State {
        std::mutex mutex;
        std::condition_variable changed;
        std::deque<Task> tasks;
        std::deque<Task> set_aside; // receives whose message had not come, in posting order
        bool calling = false;       // a thread is in a task's call
        size_t idle = 0;            // threads waiting for a task
        size_t starting = 0;        // threads started that have not yet waited: as good as idle
        bool stopping = false;
        std::vector<std::thread> threads;
    };
    static void run(std::shared_ptr<State> state);
    bool post_task(Task task);
    // With state->calling held (the caller's to run): the next call that may run, if any.
    static bool next_task(const std::shared_ptr<State> &state, std::unique_lock<std::mutex> &lock, Task *ret);
    // Under the state's mutex: a thread for the next call if none is free to take it.
    // false when one was needed and none could be made (the process's thread limit).
    static bool start_thread_if_needed(const std::shared_ptr<State> &state);

    std::shared_ptr<State> state_;
};

} // namespace torch_ddpd
