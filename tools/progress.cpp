// Progress lines and bars of the rlx program's long jobs (see progress.h).
#include "progress.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "commands.h"

namespace rlx::cli {
namespace {

ProgressMode g_mode = ProgressMode::kAuto;
constexpr double kShowAfterS = 1.0;    // auto mode: quiet for jobs shorter than this
constexpr double kBarIntervalS = 0.1;  // bar mode: at most ten redraws a second
constexpr int kBarWidth = 28;

}  // namespace

bool parse_progress_mode(std::string_view text, ProgressMode* mode) {
  if (text == "auto")
    *mode = ProgressMode::kAuto;
  else if (text == "bar")
    *mode = ProgressMode::kBar;
  else if (text == "plain")
    *mode = ProgressMode::kPlain;
  else if (text == "none")
    *mode = ProgressMode::kNone;
  else
    return false;
  return true;
}

void set_progress_mode(ProgressMode mode) { g_mode = mode; }
ProgressMode progress_mode() { return g_mode; }

Progress::Progress(std::string label) : label_(std::move(label)), start_(std::chrono::steady_clock::now()) {
  switch (g_mode) {
    case ProgressMode::kAuto:
      enabled_ = true;
      bar_ = stderr_is_terminal();
      delayed_ = true;
      break;
    case ProgressMode::kBar:
      enabled_ = bar_ = true;
      break;
    case ProgressMode::kPlain:
      enabled_ = true;
      break;
    case ProgressMode::kNone:
      break;
  }
}

Progress::~Progress() { finish(); }

double Progress::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::update(double fraction, std::string_view stage) {
  fraction_ = std::clamp(fraction, 0.0, 1.0);
  if (!stage.empty()) stage_ = stage;
  if (!enabled_ || finished_) return;
  const double t = elapsed_s();
  if (delayed_ && t < kShowAfterS) return;
  const bool new_stage = stage_ != last_stage_;
  if (bar_) {
    if (new_stage || !shown_ || t - last_draw_s_ >= kBarIntervalS) draw(false);
  } else if (new_stage || static_cast<int>(fraction_ * 10) != last_step_) {
    draw(false);
  }
}

void Progress::draw(bool final_draw) {
  const double t = elapsed_s();
  const int pct = static_cast<int>(fraction_ * 100);
  std::string line;
  if (bar_) {
    const int filled = static_cast<int>(fraction_ * kBarWidth);
    line = fmt::format("{} [{}{}] {:3d}% {:.1f} s", label_, std::string(static_cast<size_t>(filled), '#'),
                       std::string(static_cast<size_t>(kBarWidth - filled), '-'), pct, t);
    if (!stage_.empty()) line += "  " + stage_;
    if (!detail_.empty()) line += "  " + detail_;
    const size_t width = line.size();
    if (width < drawn_width_) line.append(drawn_width_ - width, ' ');  // clear a longer previous line
    drawn_width_ = width;
    std::fprintf(stderr, "\r%s%s", line.c_str(), final_draw ? "\n" : "");
  } else {
    if (final_draw) {
      line = fraction_ >= 1.0 ? fmt::format("{}: done in {:.1f} s", label_, t)
                              : fmt::format("{}: stopped at {}% after {:.1f} s", label_, pct, t);
    } else {
      line = fmt::format("{}: {:3d}% ({:.1f} s)", label_, pct, t);
      if (!stage_.empty()) line += " " + stage_;
      if (!detail_.empty()) line += " " + detail_;
    }
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
  shown_ = true;
  last_draw_s_ = t;
  last_step_ = static_cast<int>(fraction_ * 10);
  last_stage_ = stage_;
}

void Progress::message(std::string_view line) {
  if (bar_ && shown_ && !finished_) {
    std::fprintf(stderr, "\r%s\r", std::string(drawn_width_, ' ').c_str());
    std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
    drawn_width_ = 0;
    draw(false);
    return;
  }
  std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
}

void Progress::finish() {
  if (finished_) return;
  if (enabled_ && shown_) draw(true);
  finished_ = true;
}

std::function<void(double)> Progress::callback() {
  return [this](double f) { update(f); };
}

std::function<void(int64_t, int64_t)> Progress::byte_callback(std::string stage) {
  return [this, stage = std::move(stage)](int64_t done, int64_t total) {
    detail_ = fmt::format("{:.0f} of {:.0f} MB", static_cast<double>(done) / 1e6, static_cast<double>(total) / 1e6);
    update(total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 1.0, stage);
  };
}

}  // namespace rlx::cli
