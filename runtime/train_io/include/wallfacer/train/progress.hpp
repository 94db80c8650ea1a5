// Progress of a training run: on a terminal one line that updates in place (step, loss, tokens/s,
// MFU, time left), elsewhere a plain line every log_every steps; with --json one JSON object per
// step on stdout (losses printed so they read back bit for bit), the human line then on stderr.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace wallfacer::train {

struct StepRecord {
  int64_t step = 0;         // 1-based: steps completed
  int64_t steps_total = 0;  // of the whole run
  double loss = 0;
  double accuracy = 0;  // share of the counted targets predicted (the recall task's answer accuracy)
  double lr = 0;
  double grad_norm = 0;
  double seconds = 0;  // of this step
  double tokens_per_s = 0;
  double mfu = 0;  // fraction of peak, 0..1
  double seconds_left = 0;
};

class ProgressReporter {
 public:
  // json: a JSON line per step on stdout. terminal: human-readable progress (on stderr when json is
  // set, else stdout), updating one line in place only when that stream is a tty. log_every >= 1:
  // steps between human lines when not a tty (the first and last steps always print).
  ProgressReporter(bool json, bool terminal, int log_every);
  // The same on given streams (tests): `human_is_tty` decides between the updating line and plain lines.
  ProgressReporter(bool json, bool terminal, int log_every, std::ostream& json_out, std::ostream& human_out,
                   bool human_is_tty);

  void report(const StepRecord& record);
  // Ends the updating line (a newline on a tty). Idempotent.
  void finish();

 private:
  bool json_;
  bool terminal_;
  int log_every_;
  std::ostream* json_out_;
  std::ostream* human_out_;
  bool tty_;
  bool line_open_ = false;
  size_t last_width_ = 0;
};

std::string format_step_line(const StepRecord& record);
std::string step_record_json(const StepRecord& record);
// "3h05m", "12m04s", "42s".
std::string format_duration(double seconds);

}  // namespace wallfacer::train
