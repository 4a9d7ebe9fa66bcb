// The promise behind Work: the backend's thread completes it, callers wait on it.
#include "adjoint/distributed/work.h"

namespace adjoint::dist {

void WorkState::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool WorkState::is_completed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

void WorkState::complete(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    error_ = std::move(error);
  }
  done_cv_.notify_all();
}

void Work::wait() const {
  if (state_) state_->wait();
}

bool Work::is_completed() const { return !state_ || state_->is_completed(); }

Tensor Work::result() const {
  wait();
  return state_ ? state_->output : Tensor();
}

std::chrono::steady_clock::duration Work::elapsed() const {
  wait();
  return state_ ? state_->finished - state_->started : std::chrono::steady_clock::duration{};
}

}  // namespace adjoint::dist
