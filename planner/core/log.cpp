#include <wallfacer/core/log.hpp>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

#include <wallfacer/core/errors.hpp>

namespace wallfacer::log {
namespace {

struct Registry {
  std::mutex mutex;
  Level default_level = Level::Warn;
  std::map<std::string, Level, std::less<>> levels;
  Registry() {
    if (const char* env = std::getenv("WALLFACER_LOG")) {
      try {
        configure_locked(env);
      } catch (const InputError&) {
        // A bad environment variable must not stop the program; keep the defaults.
      }
    }
  }
  void configure_locked(std::string_view spec);
};

Registry& registry() {
  static Registry r;
  return r;
}

Level parse_level(std::string_view name) {
  static const std::map<std::string, Level, std::less<>> names{{"trace", Level::Trace}, {"debug", Level::Debug},
                                                               {"info", Level::Info},   {"warn", Level::Warn},
                                                               {"error", Level::Error}, {"off", Level::Off}};
  auto it = names.find(name);
  if (it == names.end())
    throw InputError(fmt::format("--log: unknown level '{}' (trace, debug, info, warn, error, off)", name));
  return it->second;
}

const char* level_name(Level l) {
  static const char* names[] = {"trace", "debug", "info", "warn", "error", "off"};
  return names[static_cast<int>(l)];
}

void Registry::configure_locked(std::string_view spec) {
  while (!spec.empty()) {
    size_t comma = spec.find(',');
    std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      default_level = parse_level(item);
      continue;
    }
    std::string_view cat = item.substr(0, eq);
    Level l = parse_level(item.substr(eq + 1));
    if (cat == "all") {
      default_level = l;
      levels.clear();
    } else {
      levels[std::string(cat)] = l;
    }
  }
}

}  // namespace

void set_level(std::string_view category, Level l) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  if (category == "all") {
    r.default_level = l;
    r.levels.clear();
  } else {
    r.levels[std::string(category)] = l;
  }
}

Level level(std::string_view category) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.levels.find(category);
  return it == r.levels.end() ? r.default_level : it->second;
}

bool enabled(std::string_view category, Level l) {
  return l >= level(category) && l != Level::Off;
}

void configure(std::string_view spec) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  r.configure_locked(spec);
}

void write(std::string_view category, Level l, const std::string& message) {
  std::fprintf(stderr, "[%s] %.*s: %s\n", level_name(l), static_cast<int>(category.size()), category.data(),
               message.c_str());
}

}  // namespace wallfacer::log
