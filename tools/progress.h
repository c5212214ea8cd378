// Progress of the rlx program's long jobs (load, synth, quantize, convert, bench phases,
// compile, perplexity) on stderr: a bar rewritten in place when stderr is a terminal,
// plain lines when it is not (a log, a pipe), nothing with `--progress none`. In the
// default mode nothing is shown for a job that ends within about a second, so quick
// commands print only their results.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace rlx::cli {

/// How progress is shown (the global `--progress` flag).
enum class ProgressMode {
  kAuto,   ///< a bar on a terminal, plain lines otherwise; only for jobs past ~1 s
  kBar,    ///< always the bar (rewritten with '\r')
  kPlain,  ///< always plain lines: at every 10 % step and when a stage changes
  kNone,   ///< nothing
};

/// Parses "auto", "bar", "plain" or "none".
bool parse_progress_mode(std::string_view text, ProgressMode* mode);
/// Sets the mode for every Progress made after the call.
void set_progress_mode(ProgressMode mode);
ProgressMode progress_mode();

/// One job's progress. update() is cheap (rate-limited output); finish() ends the line
/// and, when anything was shown, prints the elapsed time. Not thread-safe: call it from
/// one thread at a time.
class Progress {
 public:
  /// `label` starts every line ("rlx quantize", "loading weights").
  explicit Progress(std::string label);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// The fraction done (clamped to 0..1) and an optional stage name shown after it.
  void update(double fraction, std::string_view stage = {});
  double fraction() const { return fraction_; }
  /// Text shown after the stage whose changes print no plain line ("3 of 9 MB").
  void set_detail(std::string detail) { detail_ = std::move(detail); }
  /// Ends the job (idempotent; the destructor calls it).
  void finish();
  /// Prints `line` on stderr without breaking the bar (it is cleared and redrawn).
  void message(std::string_view line);
  /// A callback for library options that report a fraction (QuantizeOptions::progress, ...).
  std::function<void(double)> callback();
  /// A callback for byte counts (LoadOptions::on_weight_progress): (done, total), shown
  /// under the stage `stage` with "N of M MB".
  std::function<void(int64_t, int64_t)> byte_callback(std::string stage);

 private:
  void draw(bool final_draw);
  double elapsed_s() const;

  std::string label_, stage_;
  std::string detail_;  // shown after the stage; its changes print no plain line
  bool enabled_ = false, bar_ = false, delayed_ = false;
  bool shown_ = false, finished_ = false;
  size_t drawn_width_ = 0;  // bar mode: characters of the line on screen
  double fraction_ = 0, last_draw_s_ = -1;
  int last_step_ = -1;  // plain mode: the last 10 % step printed
  std::string last_stage_;
  std::chrono::steady_clock::time_point start_;
};

/// Shows a model's preparation as one job: each executable compiled (or read from the
/// AOT cache) is a stage, the weights bound to it the fraction. `options` is a
/// models::LoadOptions (or any options with on_compile and on_weight_progress); the
/// callbacks share the returned Progress, which the caller finishes when the model is
/// ready (later compiles then show nothing).
template <class LoadOptions>
std::shared_ptr<Progress> attach_load_progress(LoadOptions& options, std::string label) {
  auto progress = std::make_shared<Progress>(std::move(label));
  options.on_compile = [progress](const std::string& what) {
    progress->set_detail({});
    progress->update(progress->fraction(), "compiling " + what);
  };
  options.on_weight_progress = [progress, bytes = progress->byte_callback("binding weights")](
                                   int64_t done, int64_t total) { bytes(done, total); };
  return progress;
}

}  // namespace rlx::cli
