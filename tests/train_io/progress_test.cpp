// The progress reporter: one JSON object per step whose numbers read back bit for bit, plain
// lines every log_every steps off a terminal, one line rewritten in place on a terminal.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include <wallfacer/train/progress.hpp>

namespace wallfacer::train {
namespace {

StepRecord record(int64_t step, int64_t total) {
  return StepRecord{.step = step,
                    .steps_total = total,
                    .loss = 1.0 / 3.0 + static_cast<double>(step) * 0.1,
                    .accuracy = static_cast<double>(step) / 7.0,
                    .lr = 3e-4 * static_cast<double>(step) / static_cast<double>(total),
                    .grad_norm = 0.1 + 0.2,
                    .seconds = 0.25,
                    .tokens_per_s = 123456.7,
                    .mfu = 0.4321,
                    .seconds_left = 0.25 * static_cast<double>(total - step)};
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  return lines;
}

TEST(Progress, JsonHasOneRecordPerStepThatReadsBackExactly) {
  std::ostringstream json, human;
  ProgressReporter reporter(true, false, 100, json, human, false);
  for (int64_t step = 1; step <= 7; ++step)
    reporter.report(record(step, 7));
  reporter.finish();
  EXPECT_EQ(human.str(), "");
  const auto lines = lines_of(json.str());
  ASSERT_EQ(lines.size(), 7u);
  for (int64_t step = 1; step <= 7; ++step) {
    const auto j = nlohmann::json::parse(lines[step - 1]);
    const StepRecord r = record(step, 7);
    EXPECT_EQ(j.at("step").get<int64_t>(), step);
    EXPECT_EQ(j.at("steps_total").get<int64_t>(), 7);
    EXPECT_EQ(j.at("loss").get<double>(), r.loss);  // exact, not near
    EXPECT_EQ(j.at("accuracy").get<double>(), r.accuracy);
    EXPECT_EQ(j.at("lr").get<double>(), r.lr);
    EXPECT_EQ(j.at("grad_norm").get<double>(), r.grad_norm);
    EXPECT_EQ(j.at("tokens_per_s").get<double>(), r.tokens_per_s);
    EXPECT_EQ(j.at("mfu").get<double>(), r.mfu);
    EXPECT_EQ(j.at("seconds").get<double>(), r.seconds);
    EXPECT_EQ(j.at("seconds_left").get<double>(), r.seconds_left);
  }
  StepRecord diverged = record(1, 1);
  diverged.loss = std::nan("");
  EXPECT_TRUE(nlohmann::json::parse(step_record_json(diverged)).at("loss").is_null());
}

TEST(Progress, PlainLinesEveryLogEveryStepsOffATerminal) {
  std::ostringstream json, human;
  ProgressReporter reporter(false, true, 4, json, human, false);
  for (int64_t step = 1; step <= 10; ++step)
    reporter.report(record(step, 10));
  reporter.finish();
  EXPECT_EQ(json.str(), "");
  const auto lines = lines_of(human.str());
  ASSERT_EQ(lines.size(), 4u);  // steps 1, 4, 8 and the last
  EXPECT_EQ(lines[0].rfind("step 1/10  loss 0.4333", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1].rfind("step 4/10", 0), 0u) << lines[1];
  EXPECT_EQ(lines[2].rfind("step 8/10", 0), 0u) << lines[2];
  EXPECT_EQ(lines[3].rfind("step 10/10", 0), 0u) << lines[3];
  EXPECT_NE(lines[1].find("123.5k tok/s"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("MFU 43.2%"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("left 2s"), std::string::npos) << lines[1];
  EXPECT_EQ(human.str().find('\r'), std::string::npos);
}

TEST(Progress, OneLineRewrittenInPlaceOnATerminal) {
  std::ostringstream json, human;
  ProgressReporter reporter(true, true, 1000, json, human, true);
  StepRecord long_line = record(1, 3);
  long_line.seconds_left = 4 * 3600;
  reporter.report(long_line);
  reporter.report(record(2, 3));
  reporter.report(record(3, 3));
  EXPECT_EQ(human.str().find('\n'), std::string::npos) << "a terminal gets one updating line";
  reporter.finish();
  reporter.finish();
  const std::string out = human.str();
  EXPECT_EQ(std::count(out.begin(), out.end(), '\r'), 3);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1);
  EXPECT_EQ(out.back(), '\n');
  // The shorter second line is padded to cover the first.
  const auto first = out.find('\r', 1);
  const auto second = out.find('\r', first + 1);
  EXPECT_GE(second - first, first) << out;
  EXPECT_EQ(lines_of(json.str()).size(), 3u);
}

TEST(Progress, DurationsReadNaturally) {
  EXPECT_EQ(format_duration(42), "42s");
  EXPECT_EQ(format_duration(724), "12m04s");
  EXPECT_EQ(format_duration(3 * 3600 + 5 * 60 + 10), "3h05m");
  EXPECT_EQ(format_duration(-1), "?");
  EXPECT_EQ(format_duration(std::nan("")), "?");
}

}  // namespace
}  // namespace wallfacer::train
