// The streaming generation iterator (see text_stream.h).
#include "text_stream.h"

#include <chrono>
#include <utility>

#include "errors.h"

namespace rlx::python {
namespace py = pybind11;

TextStream::TextStream(py::object owner, Job job, std::function<void()> on_done)
    : on_done_(std::move(on_done)), owner_(std::move(owner)) {
  worker_ = std::thread([this, job = std::move(job)] {
    auto emit = [this](const std::string& piece) {
      std::lock_guard<std::mutex> lock(mu_);
      pieces_.push_back(piece);
      cv_.notify_one();
    };
    auto check = [this]() -> Status {
      if (cancel_.load()) return Error::invalid_argument("the stream was closed");
      return {};
    };
    Status s = job(emit, check);
    std::lock_guard<std::mutex> lock(mu_);
    if (!s.ok() && !cancel_.load()) error_ = s.error();
    done_ = true;
    cv_.notify_one();
  });
}

TextStream::~TextStream() {
  cancel_.store(true);
  py::gil_scoped_release nogil;
  finish();
}

void TextStream::join() {
  if (worker_.joinable()) worker_.join();
}

void TextStream::finish() {
  join();
  if (on_done_) std::exchange(on_done_, nullptr)();
}

void TextStream::close() {
  cancel_.store(true);
  py::gil_scoped_release nogil;
  finish();
  std::lock_guard<std::mutex> lock(mu_);
  pieces_.clear();  // what was generated but not read is dropped
  error_.reset();
}

std::optional<std::string> TextStream::next() {
  if (cancel_.load()) return std::nullopt;  // closed
  while (true) {
    {
      py::gil_scoped_release nogil;
      std::unique_lock<std::mutex> lock(mu_);
      // A bounded wait: Ctrl-C is noticed within this interval (signal handlers run
      // only on the main thread, holding the GIL, below).
      cv_.wait_for(lock, std::chrono::milliseconds(20), [this] { return !pieces_.empty() || done_; });
      if (!pieces_.empty()) {
        std::string piece = std::move(pieces_.front());
        pieces_.pop_front();
        return piece;
      }
      if (done_) {
        lock.unlock();
        finish();
        if (error_) {
          Error e = *error_;
          error_.reset();
          throw ErrorException(std::move(e));
        }
        return std::nullopt;
      }
    }
    if (PyErr_CheckSignals() != 0) {
      py::error_already_set raised;  // fetched now, raised after the worker stops
      close();
      throw raised;
    }
  }
}

}  // namespace rlx::python
