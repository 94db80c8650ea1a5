// Parses markdown for command blocks and their annotations (docs/doc-tests.md). The document is
// first cut into fenced blocks and annotation comments; annotations then attach to the block they
// touch, with only blank lines (or other annotations on the same side) in between, so a comment
// that drifted away from its block is reported rather than silently ignored.
#include "doc_commands/doc_blocks.hpp"

#include <algorithm>
#include <cctype>
#include <regex>
#include <sstream>

namespace wallfacer::doc_commands {
namespace {

enum class Kind { kFence, kCommands, kSetup, kExpect, kNotRun };

// A fenced block (lines between the fences in `body`) or an annotation comment (`head`: the rest
// of the comment's first line after the keyword; `body`: its later lines, up to the `-->`).
struct Item {
  Kind kind = Kind::kFence;
  int first = 0, last = 0;  // 1-based, inclusive
  std::string head;
  std::vector<std::string> body;
};

bool is_annotation(Kind kind) {
  return kind != Kind::kFence;
}
bool follows_its_block(Kind kind) {
  return kind == Kind::kExpect || kind == Kind::kNotRun;
}

std::string trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t\r") - begin + 1);
}

bool blank(const std::string& s) {
  return trim(s).empty();
}

// Markdown lets block syntax be indented by up to three spaces; four make an indented code block.
size_t indent(const std::string& line) {
  size_t i = 0;
  while (i < line.size() && i < 4 && line[i] == ' ')
    ++i;
  return i;
}

struct Fence {
  char mark = '`';
  size_t length = 0;
};

std::optional<Fence> fence_opening(const std::string& line) {
  const size_t i = indent(line);
  if (i > 3 || i >= line.size() || (line[i] != '`' && line[i] != '~')) return std::nullopt;
  size_t n = 0;
  while (i + n < line.size() && line[i + n] == line[i])
    ++n;
  if (n < 3) return std::nullopt;
  if (line[i] == '`' && line.find('`', i + n) != std::string::npos) return std::nullopt;  // inline code
  return Fence{line[i], n};
}

bool fence_closes(const std::string& line, const Fence& fence) {
  const size_t i = indent(line);
  if (i > 3) return false;
  size_t n = 0;
  while (i + n < line.size() && line[i + n] == fence.mark)
    ++n;
  return n >= fence.length && blank(line.substr(i + n));
}

std::optional<Kind> annotation_kind(const std::string& keyword) {
  if (keyword == "commands") return Kind::kCommands;
  if (keyword == "setup") return Kind::kSetup;
  if (keyword == "expect") return Kind::kExpect;
  if (keyword == "not-run") return Kind::kNotRun;
  return std::nullopt;
}

// The comment that opens on lines[at] (after `<!--`); nullopt for comments that are not
// annotations. `end` is set to the line holding `-->`.
std::optional<Item> read_comment(const std::vector<std::string>& lines, size_t at, size_t& end) {
  const size_t open = lines[at].find("<!--") + 4;
  std::vector<std::string> text;
  end = at;
  for (size_t from = open;; from = 0) {
    const size_t close = lines[end].find("-->", from);
    text.push_back(lines[end].substr(from, close == std::string::npos ? std::string::npos : close - from));
    if (close != std::string::npos) break;
    if (++end == lines.size()) return std::nullopt;
  }
  const std::string first = trim(text.front());
  const size_t cut = std::min(first.find_first_of(" \t:"), first.size());
  const std::optional<Kind> kind = annotation_kind(first.substr(0, cut));
  if (!kind) return std::nullopt;
  Item item{*kind, int(at) + 1, int(end) + 1, trim(first.substr(cut)), {}};
  if (*kind == Kind::kNotRun && !item.head.empty() && item.head.front() == ':') item.head = trim(item.head.substr(1));
  item.body.assign(text.begin() + 1, text.end());
  return item;
}

// Cuts the document into fenced blocks and annotations, in order.
std::vector<Item> scan(const std::vector<std::string>& lines, const std::string& name,
                       std::vector<std::string>& problems) {
  std::vector<Item> items;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (const std::optional<Fence> fence = fence_opening(lines[i])) {
      size_t close = i + 1;
      while (close < lines.size() && !fence_closes(lines[close], *fence))
        ++close;
      if (close == lines.size())
        problems.push_back(name + ":" + std::to_string(i + 1) + ": the fenced block is never closed");
      items.push_back({Kind::kFence, int(i) + 1, int(close) + 1, "", {}});
      items.back().body.assign(lines.begin() + i + 1, lines.begin() + std::min(close, lines.size()));
      i = close;
    } else if (indent(lines[i]) <= 3 && lines[i].compare(indent(lines[i]), 4, "<!--") == 0) {
      size_t end = i;
      std::optional<Item> annotation = read_comment(lines, i, end);
      if (end == lines.size()) {
        problems.push_back(name + ":" + std::to_string(i + 1) + ": the comment is never closed with -->");
        break;
      }
      if (annotation) items.push_back(std::move(*annotation));
      i = end;
    }
  }
  return items;
}

bool blank_between(const std::vector<std::string>& lines, int after, int before) {
  for (int line = after + 1; line < before; ++line)
    if (!blank(lines[line - 1])) return false;
  return true;
}

// The fenced block annotation `k` belongs to, or -1: the nearest item on its side, reached over
// blank lines and over annotations that sit on the same side of the same block.
int owner_of(const std::vector<Item>& items, size_t k, const std::vector<std::string>& lines) {
  const bool after = follows_its_block(items[k].kind);
  const int step = after ? -1 : 1;
  for (int j = int(k), n = int(k) + step; n >= 0 && n < int(items.size()); j = n, n += step) {
    const Item &near = items[j], &next = items[n];
    if (!(after ? blank_between(lines, next.last, near.first) : blank_between(lines, near.last, next.first))) return -1;
    if (next.kind == Kind::kFence) return n;
    if (follows_its_block(next.kind) != after) return -1;
  }
  return -1;
}

// Commands of a block: `$ ` lines, or with `every_line` each line that is not blank or a `#`
// comment; a line ending in `\` continues on the next.
std::vector<Command> extract_commands(const std::vector<std::string>& body, int first_line, bool every_line) {
  std::vector<Command> commands;
  bool continuing = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const std::string text = trim(body[i]);
    if (continuing && !text.empty()) {
      commands.back().text += " " + text;
    } else if (every_line && !text.empty() && text.front() != '#') {
      commands.push_back({first_line + int(i), text});
    } else if (!every_line && body[i].rfind("$ ", 0) == 0 && !blank(body[i].substr(2))) {
      commands.push_back({first_line + int(i), trim(body[i].substr(2))});
    } else {
      continuing = false;
      continue;
    }
    std::string& last = commands.back().text;
    continuing = !last.empty() && last.back() == '\\';
    if (continuing) last = trim(last.substr(0, last.size() - 1));
  }
  return commands;
}

std::vector<std::string> annotation_lines(const Item& item) {
  std::vector<std::string> lines{item.head};
  lines.insert(lines.end(), item.body.begin(), item.body.end());
  return lines;
}

// One `$N ...` line of an expect comment; `error` says why it is not one.
std::optional<Check> parse_directive(const std::string& text, int line, std::string& error) {
  static const std::regex form(R"(^\$(\d+)\s+(!~|~|exit|timeout)(\s+(.*))?$)");
  std::smatch m;
  if (!std::regex_match(text, m, form)) {
    error = "not a directive ($N ~ REGEX, $N !~ REGEX, $N exit STATUS, $N timeout SECONDS): " + text;
    return std::nullopt;
  }
  Check check{line, std::stoi(m[1].str()), CheckKind::kMatches, trim(m[4].str()), 0};
  const std::string verb = m[2].str();
  if (verb == "~" || verb == "!~") {
    check.kind = verb == "~" ? CheckKind::kMatches : CheckKind::kNoMatch;
    try {
      const std::regex compiled(check.pattern);
    } catch (const std::regex_error& e) {
      error = "bad regular expression /" + check.pattern + "/: " + e.what();
      return std::nullopt;
    }
    if (!check.pattern.empty()) return check;
    error = "the pattern is empty";
    return std::nullopt;
  }
  check.kind = verb == "exit" ? CheckKind::kExit : CheckKind::kTimeout;
  const int high = verb == "exit" ? 255 : 86400, low = verb == "exit" ? 0 : 1;
  const bool number =
      !check.pattern.empty() && check.pattern.size() < 6 &&
      std::all_of(check.pattern.begin(), check.pattern.end(), [](unsigned char c) { return std::isdigit(c); });
  if (number) check.value = std::stoi(check.pattern);
  if (number && check.value >= low && check.value <= high) return check;
  error = verb + " takes a whole number from " + std::to_string(low) + " to " + std::to_string(high);
  return std::nullopt;
}

void read_expectations(const Item& expect, Block& block, const std::string& name, std::vector<std::string>& problems) {
  const std::vector<std::string> lines = annotation_lines(expect);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string text = trim(lines[i]);
    if (text.empty() || text.front() == '#') continue;
    const int line = expect.first + int(i);
    std::string error;
    if (std::optional<Check> check = parse_directive(text, line, error))
      block.checks.push_back(std::move(*check));
    else
      problems.push_back(name + ":" + std::to_string(line) + ": " + error);
  }
}

// What the annotations of a block must satisfy once they are all read.
void validate(const Block& block, const std::string& name, std::vector<std::string>& problems) {
  const std::string where = name + ":" + std::to_string(block.line) + ": ";
  if (block.not_run) {
    if (block.not_run->empty()) problems.push_back(where + "<!-- not-run: --> must say why the block is not run");
    if (block.expected) problems.push_back(where + "the block is both expected and not run");
    return;
  }
  if (!block.expected) {
    problems.push_back(where + "the command block has no <!-- expect ... --> comment after it (or <!-- not-run: " +
                       "reason --> if it cannot run here)");
    return;
  }
  if (block.commands.empty()) problems.push_back(where + "the block has expectations but no commands");
  for (const Check& check : block.checks)
    if (check.command < 1 || check.command > int(block.commands.size()))
      problems.push_back(name + ":" + std::to_string(check.line) + ": $" + std::to_string(check.command) +
                         " names no command: the block has " + std::to_string(block.commands.size()));
  for (size_t i = 0; i < block.commands.size(); ++i) {
    const std::vector<Check> checks = checks_of(block, int(i) + 1);
    if (std::none_of(checks.begin(), checks.end(),
                     [](const Check& c) { return c.kind == CheckKind::kMatches || c.kind == CheckKind::kNoMatch; }))
      problems.push_back(name + ":" + std::to_string(block.commands[i].line) + ": command $" + std::to_string(i + 1) +
                         " has no output pattern ($" + std::to_string(i + 1) + " ~ REGEX) in the expect comment");
  }
}

// The block made of fence `fence` and the annotations attached to it; nullopt when it holds no
// command and carries no annotation (an ordinary code block).
std::optional<Block> make_block(const Item& fence, const std::vector<const Item*>& annotations, const std::string& name,
                                std::vector<std::string>& problems) {
  const bool marked =
      std::any_of(annotations.begin(), annotations.end(), [](const Item* a) { return a->kind == Kind::kCommands; });
  Block block;
  block.line = fence.first;
  block.commands = extract_commands(fence.body, fence.first + 1, marked);
  if (block.commands.empty() && annotations.empty()) return std::nullopt;
  for (const Item* a : annotations) {
    const std::string where = name + ":" + std::to_string(a->first) + ": ";
    if (a->kind == Kind::kSetup) {
      for (Command& c : extract_commands(annotation_lines(*a), a->first, true))
        block.setup.push_back(std::move(c));
    } else if (a->kind == Kind::kNotRun) {
      if (block.not_run) problems.push_back(where + "a second <!-- not-run --> comment on the same block");
      block.not_run = a->head;
    } else if (a->kind == Kind::kExpect) {
      if (block.expected) problems.push_back(where + "a second <!-- expect --> comment on the same block");
      block.expected = true;
      read_expectations(*a, block, name, problems);
    }
  }
  validate(block, name, problems);
  return block;
}

}  // namespace

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
  }
  return lines;
}

Doc parse_doc(const std::string& name, const std::string& text) {
  Doc doc{name, {}, {}};
  const std::vector<std::string> lines = split_lines(text);
  const std::vector<Item> items = scan(lines, name, doc.problems);
  std::vector<std::vector<const Item*>> attached(items.size());
  for (size_t k = 0; k < items.size(); ++k) {
    if (!is_annotation(items[k].kind)) continue;
    const int owner = owner_of(items, k, lines);
    if (owner >= 0)
      attached[owner].push_back(&items[k]);
    else
      doc.problems.push_back(name + ":" + std::to_string(items[k].first) +
                             ": the annotation is not next to a fenced block (" +
                             (follows_its_block(items[k].kind) ? "it goes right after" : "it goes right before") +
                             " one, with only blank lines between)");
  }
  for (size_t k = 0; k < items.size(); ++k) {
    if (items[k].kind != Kind::kFence) continue;
    std::sort(attached[k].begin(), attached[k].end(), [](const Item* a, const Item* b) { return a->first < b->first; });
    if (std::optional<Block> block = make_block(items[k], attached[k], name, doc.problems))
      doc.blocks.push_back(std::move(*block));
  }
  return doc;
}

std::vector<Check> checks_of(const Block& block, int index) {
  std::vector<Check> checks;
  std::copy_if(block.checks.begin(), block.checks.end(), std::back_inserter(checks),
               [index](const Check& c) { return c.command == index; });
  return checks;
}

}  // namespace wallfacer::doc_commands
