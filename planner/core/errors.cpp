#include <wallfacer/core/errors.hpp>

#include <fmt/format.h>

namespace wallfacer {

static std::string format_input_error(const std::string& file, int line, const std::string& message) {
  if (file.empty()) return fmt::format("error: {}", message);
  if (line > 0) return fmt::format("{}:{}: error: {}", file, line, message);
  return fmt::format("{}: error: {}", file, message);
}

InputError::InputError(std::string file, int line, const std::string& message)
    : std::runtime_error(format_input_error(file, line, message)),
      file_(std::move(file)),
      line_(line),
      message_(message) {}

InputError::InputError(const std::string& message)
    : std::runtime_error(format_input_error("", 0, message)), message_(message) {}

void invariant_failed(const char* expr, const char* file, int line, const std::string& why) {
  throw std::logic_error(fmt::format("{}:{}: internal error: {} ({})", file, line, why, expr));
}

}  // namespace wallfacer
