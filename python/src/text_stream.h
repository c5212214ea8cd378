// rlx.TextStream: the iterator that generate(..., stream=True) and chat(..., stream=True)
// return. The generation runs on a worker thread (no Python, no GIL) and hands its text
// pieces over a queue; next() waits for one with the GIL released, waking every few
// milliseconds to let Ctrl-C through (the worker is then cancelled and joined). Closing
// or dropping the iterator cancels the generation after its current token.
#pragma once

#include <pybind11/pybind11.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "rlx/base/status.h"

namespace rlx::python {

class TextStream {
 public:
  /// What the worker runs: a generation that calls `emit` with each text piece and
  /// `check` between tokens (an error from `check` must end it).
  using Job = std::function<Status(const std::function<void(const std::string&)>& emit,
                                   const std::function<Status()>& check)>;

  /// Starts `job` on a worker thread. `owner` (the model) is kept alive while the
  /// stream exists; `on_done` runs once the stream is over for its reader: read to its
  /// end, closed or dropped (not when the worker alone finishes, which may be long before
  /// the reader has taken the pieces).
  TextStream(pybind11::object owner, Job job, std::function<void()> on_done);
  ~TextStream();
  TextStream(const TextStream&) = delete;
  TextStream& operator=(const TextStream&) = delete;

  /// The next piece; nullopt at the end. Raises rlx.Error when the generation failed,
  /// KeyboardInterrupt (or what a signal handler raised) on Ctrl-C. Needs the GIL.
  std::optional<std::string> next();
  /// Cancels the generation (if running) and waits for the worker; pieces not read yet
  /// are dropped and next() returns nullopt from now on. Needs the GIL.
  void close();

 private:
  void join();
  void finish();  // join, then on_done_ once

  std::function<void()> on_done_;

  pybind11::object owner_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> pieces_;
  bool done_ = false;
  std::optional<Error> error_;
  std::atomic<bool> cancel_{false};
  std::thread worker_;
};

}  // namespace rlx::python
