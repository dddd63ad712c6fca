// Coroutine task type in which algorithms are written.
//
// An algorithm is a C++20 coroutine returning Task. It posts sends and
// receives through its ExecCtx (core/algorithm.h) and co_awaits their
// completion; it may co_await another Task (a sub-algorithm). The executor
// (core/exec/executor.h) resumes suspended tasks when what they wait for is done,
// so several operations (a group) progress together on one thread.
//
// A Task is lazy (starts when first resumed or awaited) and owns its frame.
// Destroying a suspended Task destroys its frame (and its locals): that is how
// the executor cancels an operation after an error or an abort.
#pragma once

#include <coroutine>
#include <exception>
#include <utility>

namespace tide {

class [[nodiscard]] Task {
 public:
  struct promise_type {
    std::coroutine_handle<> continuation;
    bool threw = false;

    Task get_return_object() {
      return Task(std::coroutine_handle<promise_type>::from_promise(*this));
    }
    std::suspend_always initial_suspend() noexcept { return {}; }
    struct FinalAwaiter {
      bool await_ready() noexcept { return false; }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<promise_type> h) noexcept {
        std::coroutine_handle<> next = h.promise().continuation;
        return next ? next : std::noop_coroutine();
      }
      void await_resume() noexcept {}
    };
    FinalAwaiter final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    // Algorithms do not throw; a stray exception (bad_alloc) is recorded and
    // the executor turns it into an internal error.
    void unhandled_exception() noexcept { threw = true; }
  };
  using Handle = std::coroutine_handle<promise_type>;

  Task() = default;
  explicit Task(Handle h) : h_(h) {}
  Task(Task&& o) noexcept : h_(std::exchange(o.h_, {})) {}
  Task& operator=(Task&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, {});
    }
    return *this;
  }
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task() { reset(); }

  bool valid() const { return static_cast<bool>(h_); }
  bool done() const { return !h_ || h_.done(); }
  bool threw() const { return h_ && h_.promise().threw; }
  Handle handle() const { return h_; }
  void reset() {
    if (h_) h_.destroy();
    h_ = {};
  }

  // Awaiting a Task runs it to completion, then resumes the awaiter.
  bool await_ready() const noexcept { return !h_ || h_.done(); }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> parent) noexcept {
    h_.promise().continuation = parent;
    return h_;
  }
  void await_resume() const noexcept {}

 private:
  Handle h_;
};

}  // namespace tide
