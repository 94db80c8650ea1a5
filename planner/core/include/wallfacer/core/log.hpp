// A log category per module with a threshold set at run time (--log CAT=LEVEL or WALLFACER_LOG).
// Messages go to stderr so that --json output on stdout stays machine-readable.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace wallfacer::log {

enum class Level { Trace = 0, Debug = 1, Info = 2, Warn = 3, Error = 4, Off = 5 };

// Threshold for a category ("topology", "planner", "schedule", "cost", "search", "simulator",
// "runtime", "cli"); "all" sets the default for every category.
void set_level(std::string_view category, Level level);
Level level(std::string_view category);
bool enabled(std::string_view category, Level level);
// Parses "cat=level,cat2=level" (levels: trace, debug, info, warn, error, off). Throws InputError.
void configure(std::string_view spec);
void write(std::string_view category, Level level, const std::string& message);

template <typename... Args>
void logf(std::string_view category, Level lvl, fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(category, lvl)) write(category, lvl, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace wallfacer::log

#define WF_LOG_DEBUG(cat, ...) ::wallfacer::log::logf(cat, ::wallfacer::log::Level::Debug, __VA_ARGS__)
#define WF_LOG_INFO(cat, ...) ::wallfacer::log::logf(cat, ::wallfacer::log::Level::Info, __VA_ARGS__)
#define WF_LOG_WARN(cat, ...) ::wallfacer::log::logf(cat, ::wallfacer::log::Level::Warn, __VA_ARGS__)
