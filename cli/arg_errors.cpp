// Argument errors in the project's words (arg_errors.hpp).
#include "arg_errors.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <regex>
#include <vector>

namespace wallfacer::cli {
namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// The subcommand being parsed (the deepest one seen), or the top-level app.
const CLI::App& command_of(const CLI::App& app) {
  const CLI::App* command = &app;
  for (bool deeper = true; deeper;) {
    deeper = false;
    for (const CLI::App* sub : command->get_subcommands()) {
      command = sub;
      deeper = true;
      break;
    }
  }
  return *command;
}

std::string command_name(const CLI::App& app, const CLI::App& command) {
  // A nested command ("topo import") is named with every command above it.
  std::string name;
  for (const CLI::App* c = &command; c != nullptr && c != &app; c = c->get_parent())
    name = " " + c->get_name() + name;
  return app.get_name() + name;
}

// The flag's long name with dashes ("--search"), or its positional name.
std::string flag_name(const CLI::Option& option) {
  const auto& names = option.get_lnames();
  if (!names.empty()) return "--" + names.front();
  return option.get_name();
}

// A value the flag accepts: the first choice that is not the default, else the default, else
// one that fits the type. A default of several words ("the network preset's") describes where the
// value comes from and is no value to pass.
std::string example_value(const CLI::Option& option, const std::vector<std::string>& choices) {
  for (const std::string& c : choices)
    if (c != option.get_default_str()) return c;
  const std::string default_value = option.get_default_str();
  if (!default_value.empty() && default_value.find(' ') == std::string::npos) return default_value;
  const std::string type = option.get_type_name();
  if (type.find("INT") != std::string::npos || type.find("UINT") != std::string::npos) return "8";
  if (type.find("FLOAT") != std::string::npos) return "0.5";
  return "VALUE";
}

std::vector<std::string> split_choices(const std::string& set) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= set.size()) {
    const size_t comma = set.find(',', start);
    const std::string item = set.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

// The one flag whose description names `word` ("target" in --to's "target: megatron, ..."): the
// one whose description starts with it, else the one that has it as a whole word; "" when none or
// several do.
std::string flag_described_by(const CLI::App& command, const std::string& word) {
  if (word.size() < 4) return "";
  const std::regex starts("^" + word + "([^a-z0-9]|$)"), whole("(^|[^a-z0-9])" + word + "([^a-z0-9]|$)");
  for (const std::regex* pattern : {&starts, &whole}) {
    std::vector<std::string> found;
    for (const CLI::Option* option : command.get_options()) {
      const std::string flag = flag_name(*option);
      if (flag.rfind("--", 0) == 0 && std::regex_search(lowercase(option->get_description()), *pattern))
        found.push_back(flag);
    }
    if (found.size() == 1) return found.front();
    if (found.size() > 1) return "";
  }
  return "";
}

std::string unknown_flag(const CLI::App& app, const CLI::App& command, const std::string& what) {
  const std::string name = command_name(app, command);
  std::string best;
  size_t best_distance = 4;  // farther than 3 edits suggests nothing
  for (const CLI::Option* option : command.get_options()) {
    const std::string flag = flag_name(*option);
    if (flag.rfind("--", 0) != 0) continue;
    // A flag cut short (--zero for --zero-stage) is nearer than any few edits.
    const size_t d = what.size() > 3 && flag.rfind(what, 0) == 0 ? 0 : edit_distance(flag, what);
    if (d < best_distance) best_distance = d, best = flag;
  }
  // Else a flag named by another word for what it sets (--target for --to).
  if (best.empty() && what.rfind("--", 0) == 0) {
    const std::string word = lowercase(what.substr(2));
    if (std::all_of(word.begin(), word.end(), [](unsigned char c) { return std::isalnum(c); }))
      best = flag_described_by(command, word);
  }
  return fmt::format("{}: error: unknown argument '{}'{}\n  `{} --help` lists what it takes\n", name, what,
                     best.empty() ? "" : fmt::format("; did you mean {}?", best), name);
}

}  // namespace

std::string describe_parse_error(const CLI::App& app, const CLI::ParseError& error) {
  const CLI::App& command = command_of(app);
  const std::string name = command_name(app, command);
  const std::string text = error.what();
  std::smatch m;
  if (std::regex_search(text, m, std::regex("^The following arguments? (?:was|were) not expected: (.*)$"))) {
    // The first flag among the leftovers (a flag's value comes before it in CLI11's list).
    const std::vector<std::string> extras = [&] {
      std::vector<std::string> words;
      std::string rest = m[1].str();
      for (size_t at = 0; at < rest.size();) {
        const size_t space = rest.find(' ', at);
        words.push_back(rest.substr(at, space == std::string::npos ? std::string::npos : space - at));
        at = space == std::string::npos ? rest.size() : space + 1;
      }
      return words;
    }();
    const auto flag =
        std::find_if(extras.begin(), extras.end(), [](const std::string& w) { return w.rfind("-", 0) == 0; });
    return unknown_flag(app, command, flag != extras.end() ? *flag : extras.front());
  }
  if (std::regex_search(text, m, std::regex("^(\\S+) is required")) ||
      std::regex_search(text, m, std::regex("^(--\\S+): \\d+ required"))) {
    // A misspelt flag (--target for --to) leaves the one meant unset: name the misspelt one.
    // CLI11 keeps a word no command knows with the command above it.
    for (const std::string& word : app.remaining(true))
      if (word.rfind("-", 0) == 0) return unknown_flag(app, command, word);
    if (const CLI::Option* option = command.get_option_no_throw(m[1].str())) {
      // A flag checked against a set shows it in its type name ("TEXT:{a,b}"): offer one of them.
      std::smatch set;
      const std::string type = option->get_type_name();
      const std::vector<std::string> choices = std::regex_search(type, set, std::regex("\\{(.*)\\}"))
                                                   ? split_choices(set[1].str())
                                                   : std::vector<std::string>{};
      const std::string value = lowercase(option->get_description()).find("plan file") != std::string::npos
                                    ? "plan.yaml"
                                    : example_value(*option, choices);
      return fmt::format("{}: error: {} is required: {}\n  example: {} {}{}\n", name, flag_name(*option),
                         option->get_description(), name, option->get_lnames().empty() ? "" : flag_name(*option) + " ",
                         value);
    }
  }
  // CLI11 words a value it cannot convert as "Could not convert: --seq = abc".
  const std::string conversion = std::regex_replace(text, std::regex("^Could not convert: (--[A-Za-z0-9-]+) = (.*)$"),
                                                    "$1: Could not convert: $2");
  if (!std::regex_search(conversion, m, std::regex("^(--[A-Za-z0-9-]+): (.*)$")))
    return fmt::format("{}: error: {}\n", name, text);
  const CLI::Option* option = command.get_option_no_throw(m[1].str());
  if (option == nullptr) return fmt::format("{}: error: {}\n", name, text);
  const std::string flag = flag_name(*option), detail = m[2].str();
  std::vector<std::string> choices;
  std::string problem = detail;
  std::smatch d;
  if (std::regex_search(detail, d, std::regex("^(.*) not in \\{(.*)\\}$"))) {
    choices = split_choices(d[2].str());
    problem = fmt::format("expects one of {}, got '{}'", fmt::join(choices, ", "), d[1].str());
  } else if (std::regex_search(detail, d, std::regex("^Value (\\S+) not in range (\\S+) to (\\S+)"))) {
    problem =
        fmt::format("expects a number from {} to {}, got {}", std::stod(d[2].str()), std::stod(d[3].str()), d[1].str());
  } else if (std::regex_search(detail, d, std::regex("^not an integer: (.*)$"))) {
    problem = fmt::format("expects a whole number, got '{}'", d[1].str());
  } else if (std::regex_search(detail, d, std::regex("^(?:not a number|Could not convert): ?(.*)$"))) {
    problem = fmt::format("expects a number, got '{}'", d[1].str());
  }
  return fmt::format("{}: error: {}: {}\n  {}: {}\n  example: {} {} {}\n", name, flag, problem, flag,
                     option->get_description(), name, flag, example_value(*option, choices));
}

}  // namespace wallfacer::cli
