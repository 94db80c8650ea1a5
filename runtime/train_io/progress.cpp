#include <wallfacer/train/progress.hpp>

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>

namespace wallfacer::train {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

namespace {
std::string format_rate(double tokens_per_s) {
  if (tokens_per_s >= 1e6) return fmt::format("{:.2f}M", tokens_per_s / 1e6);
  if (tokens_per_s >= 1e3) return fmt::format("{:.1f}k", tokens_per_s / 1e3);
  return fmt::format("{:.0f}", tokens_per_s);
}
}  // namespace

std::string format_step_line(const StepRecord& r) {
  return fmt::format("step {}/{}  loss {:.4f}  lr {:.2e}  |g| {:.3g}  {} tok/s  MFU {:.1f}%  {:.3f} s/step  left {}",
                     r.step, r.steps_total, r.loss, r.lr, r.grad_norm, format_rate(r.tokens_per_s), 100 * r.mfu,
                     r.seconds, format_duration(r.seconds_left));
}

// nlohmann prints doubles in their shortest round-trip form, so a loss read back from the JSON is
// the same double; non-finite values print as null.
std::string step_record_json(const StepRecord& r) {
  const nlohmann::ordered_json j = {
      {"step", r.step}, {"steps_total", r.steps_total},  {"loss", r.loss},       {"accuracy", r.accuracy},
      {"lr", r.lr},     {"grad_norm", r.grad_norm},      {"seconds", r.seconds}, {"tokens_per_s", r.tokens_per_s},
      {"mfu", r.mfu},   {"seconds_left", r.seconds_left}};
  return j.dump();
}

ProgressReporter::ProgressReporter(bool json, bool terminal, int log_every)
    : ProgressReporter(json, terminal, log_every, std::cout, json ? std::cerr : std::cout,
                       ::isatty(json ? STDERR_FILENO : STDOUT_FILENO) == 1) {}

ProgressReporter::ProgressReporter(bool json, bool terminal, int log_every, std::ostream& json_out,
                                   std::ostream& human_out, bool human_is_tty)
    : json_(json),
      terminal_(terminal),
      log_every_(log_every < 1 ? 1 : log_every),
      json_out_(&json_out),
      human_out_(&human_out),
      tty_(human_is_tty) {}

void ProgressReporter::report(const StepRecord& record) {
  if (json_) *json_out_ << step_record_json(record) << '\n' << std::flush;
  if (!terminal_) return;
  const std::string line = format_step_line(record);
  if (tty_) {
    // Rewrite the line in place; spaces clear what a longer previous line left.
    const size_t pad = last_width_ > line.size() ? last_width_ - line.size() : 0;
    *human_out_ << '\r' << line << std::string(pad, ' ') << std::flush;
    last_width_ = line.size();
    line_open_ = true;
    return;
  }
  const bool due = record.step == 1 || record.step % log_every_ == 0 || record.step == record.steps_total;
  if (due) *human_out_ << line << '\n' << std::flush;
}

void ProgressReporter::finish() {
  if (line_open_) *human_out_ << '\n' << std::flush;
  line_open_ = false;
  last_width_ = 0;
}

}  // namespace wallfacer::train
