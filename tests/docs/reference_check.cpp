// The checker behind test_docs. It works line by line on plain text, without a Markdown or C++
// parser: references are short, single-line things, and a checker that is easy to read is easier
// to trust than one that understands every corner of both languages. Where it must know the
// syntax (comments, string literals, code fences) it knows just enough.
#include "reference_check.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>

namespace wallfacer::docs_check {
namespace {

namespace fs = std::filesystem;

// ---- text helpers -----------------------------------------------------------------------------

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  return lines;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool starts_with(const std::string& s, const std::string& head) {
  return s.rfind(head, 0) == 0;
}

bool is_path_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '/' || c == '-';
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Blanks `text[begin, end)` with spaces, so later passes neither see it nor lose their columns.
void blank(std::string& text, size_t begin, size_t end) {
  std::fill(text.begin() + static_cast<std::ptrdiff_t>(begin), text.begin() + static_cast<std::ptrdiff_t>(end), ' ');
}

// ---- paths ------------------------------------------------------------------------------------

// "a/./b/../c" -> "a/c"; nothing when the path climbs out of the repository.
std::optional<std::string> normalize(const std::string& path) {
  std::vector<std::string> parts;
  std::istringstream in(path);
  for (std::string part; std::getline(in, part, '/');) {
    if (part.empty() || part == ".") continue;
    if (part != "..") {
      parts.push_back(part);
    } else if (parts.empty()) {
      return std::nullopt;
    } else {
      parts.pop_back();
    }
  }
  std::string out;
  for (const std::string& part : parts)
    out += (out.empty() ? "" : "/") + part;
  return out;
}

// A path that starts with one of these folders and ends in one of these extensions (or in '/', a
// folder) names a source of the repository. A path that starts anywhere else ("build/", a
// subfolder such as "strategies/", another project's "src/graph/") or a bare file name is not
// read: only a path from the root says unambiguously which file it means.
const std::array<std::string, 13> kTopFolders = {"planner/", "simulator/", "runtime/",    "cli/",    "tests/",
                                                 "bench/",   "docs/",      "topologies/", "models/", "scripts/",
                                                 "cmake/",   "gui/",       ".ci/"};
const std::array<std::string, 9> kSourceExtensions = {".hpp", ".cpp", ".cmake", ".yaml", ".sh",
                                                      ".md",  ".txt", ".json",  ".py"};
// Public headers are named as they are included, below some component's include/ folder.
const std::string kIncludeRoot = "wallfacer/";

bool has_source_extension(const std::string& path) {
  return std::any_of(kSourceExtensions.begin(), kSourceExtensions.end(),
                     [&](const std::string& ext) { return ends_with(path, ext); });
}

std::string folder_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

// ---- which text may not hold machine paths -----------------------------------------------------

enum class Syntax { Markdown, CFamily, Hash };

Syntax syntax_of(const std::string& path) {
  if (ends_with(path, ".md")) return Syntax::Markdown;
  if (ends_with(path, ".cpp") || ends_with(path, ".hpp") || ends_with(path, ".h")) return Syntax::CFamily;
  return Syntax::Hash;
}

bool is_ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// The closing sequence of a raw string literal whose opening quote is at `quote`, or nothing when
// the quote opens an ordinary literal. Raw strings matter: test data often holds "//" or '#'.
std::optional<std::string> raw_string_end(const std::string& text, size_t quote) {
  size_t start = quote;
  while (start > 0 && is_ident_char(text[start - 1]))
    --start;
  const std::string prefix = text.substr(start, quote - start);
  if (prefix != "R" && prefix != "u8R" && prefix != "uR" && prefix != "UR" && prefix != "LR") return std::nullopt;
  const size_t paren = text.find('(', quote);
  if (paren == std::string::npos) return std::nullopt;
  return ")" + text.substr(quote + 1, paren - quote - 1) + "\"";
}

// The comment text on each line of a C or C++ file: what follows "//", and what lies inside
// "/* */", never the contents of string or character literals.
std::vector<std::string> c_comments(const std::string& text) {
  enum class State { Code, Line, Block, String, Char, Raw } state = State::Code;
  std::vector<std::string> lines(1);
  std::string raw_end;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const char next = i + 1 < text.size() ? text[i + 1] : '\0';
    if (c == '\n') {
      lines.emplace_back();
      if (state == State::Line || state == State::String || state == State::Char) state = State::Code;
      continue;
    }
    switch (state) {
      case State::Code:
        if (c == '/' && (next == '/' || next == '*')) {
          state = next == '/' ? State::Line : State::Block;
          ++i;
        } else if (c == '"') {
          const auto end = raw_string_end(text, i);
          state = end ? State::Raw : State::String;
          if (end) raw_end = *end;
        } else if (c == '\'' && !(i > 0 && is_ident_char(text[i - 1]))) {
          state = State::Char;
        }
        break;
      case State::Line:
        lines.back() += c;
        break;
      case State::Block:
        if (c == '*' && next == '/') {
          state = State::Code;
          ++i;
        } else {
          lines.back() += c;
        }
        break;
      case State::String:
      case State::Char:
        if (c == '\\' && next != '\n') {
          ++i;
        } else if (c == (state == State::String ? '"' : '\'')) {
          state = State::Code;
        }
        break;
      case State::Raw:
        if (text.compare(i, raw_end.size(), raw_end) == 0) {
          i += raw_end.size() - 1;
          state = State::Code;
        }
        break;
    }
  }
  return lines;
}

// The comment on one line of a CMake, shell or YAML file: what follows a '#' that starts the line
// or follows a blank and is not inside a double-quoted string ("$#" and "${#x}" are not comments).
std::string hash_comment(const std::string& line) {
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    if (quoted) {
      if (line[i] == '\\') ++i;
      if (i < line.size() && line[i] == '"') quoted = false;
    } else if (line[i] == '"') {
      quoted = true;
    } else if (line[i] == '#' && (i == 0 || std::isspace(static_cast<unsigned char>(line[i - 1])))) {
      return line.substr(i + 1);
    }
  }
  return "";
}

// For every line, its prose: the whole line of a Markdown file, the comment of every other file.
// Machine paths and source paths are looked for there only; code may build any path it likes.
std::vector<std::string> prose_scope(const std::string& path, const std::string& text) {
  std::vector<std::string> lines = split_lines(text);
  switch (syntax_of(path)) {
    case Syntax::Markdown:
      return lines;
    case Syntax::CFamily:
      return c_comments(text);
    case Syntax::Hash:
      for (std::string& line : lines)
        line = hash_comment(line);
      return lines;
  }
  return lines;
}

// ---- references on one line ------------------------------------------------------------------

struct Reference {
  size_t begin = 0, end = 0;  // columns of the reference on its line
  std::string written;        // as written
  std::string target;         // resolved, repository-relative
  bool found = false;
  bool link = false;  // a Markdown link, resolved from the citing file's folder
};

// Blanks every URL: what a URL points at is not a file of this repository, whatever it ends in.
void blank_urls(std::string& line) {
  static const std::regex url(R"([A-Za-z][A-Za-z0-9+.-]*://[^\s)>\]"'`]+)");
  for (std::sregex_iterator it(line.begin(), line.end(), url), stop; it != stop; ++it)
    blank(line, static_cast<size_t>(it->position()), static_cast<size_t>(it->position() + it->length()));
}

Reference resolve(size_t begin, size_t end, const std::string& written, const std::string& base,
                  const Repository& repo) {
  Reference ref{begin, end, written, "", false, false};
  const auto target = normalize(base.empty() ? written : base + "/" + written);
  if (target) {
    ref.target = *target;
    ref.found = repo.has_file(*target);
  }
  return ref;
}

// Markdown links "[text](target)" whose target is a .md page or a source file resolve from the
// citing file's folder, as a Markdown viewer resolves them. Every link is blanked afterwards, so that its text
// is not read again as a path and URL links are ignored.
std::vector<Reference> take_links(std::string& line, const std::string& file, const Repository& repo) {
  static const std::regex link(R"re(\[[^\]]*\]\(<?([^)\s>]*)>?(\s+"[^"]*")?\))re");
  std::vector<Reference> refs;
  std::vector<std::pair<size_t, size_t>> spans;
  for (std::sregex_iterator it(line.begin(), line.end(), link), stop; it != stop; ++it) {
    const size_t begin = static_cast<size_t>(it->position()), end = begin + static_cast<size_t>(it->length());
    spans.emplace_back(begin, end);
    std::string target = (*it)[1].str();
    target = target.substr(0, target.find('#'));
    if (target.find("://") != std::string::npos || !(ends_with(target, ".md") || has_source_extension(target)))
      continue;
    const bool rooted = starts_with(target, "/");
    refs.push_back(resolve(begin, end, target, rooted ? "" : folder_of(file), repo));
    refs.back().link = true;
  }
  for (const auto& [begin, end] : spans)
    blank(line, begin, end);
  return refs;
}

// A bare file name in double quotes ("plan.md") is a label handed to a parser in code, not a
// reference to a page.
bool is_quoted_label(const std::string& line, size_t begin, size_t end, const std::string& token) {
  return token.find('/') == std::string::npos && begin > 0 && end < line.size() && line[begin - 1] == '"' &&
         line[end] == '"';
}

// Every other name ending in ".md" resolves from the repository root. A leading '/' is read the
// same way: code builds paths as source_dir + "/docs/" + page.
std::vector<Reference> take_paths(const std::string& line, const Repository& repo) {
  std::vector<Reference> refs;
  for (size_t i = 0; i < line.size();) {
    if (!is_path_char(line[i])) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < line.size() && is_path_char(line[end]))
      ++end;
    std::string token = line.substr(i, end - i);
    while (ends_with(token, "."))
      token.pop_back();
    const size_t slash = token.rfind('/');
    const std::string name = slash == std::string::npos ? token : token.substr(slash + 1);
    if (ends_with(token, ".md") && name.size() > 3 && !is_quoted_label(line, i, i + token.size(), token))
      refs.push_back(resolve(i, i + token.size(), token, "", repo));
    i = end;
  }
  return refs;
}

// A "§N" or "§N.M" (or a range "§N-M") with the column it starts at.
struct Citation {
  size_t column = 0;
  std::vector<std::string> sections;
};

// Reads "8.2" at `pos`; empty when no digit is there. A final '.' ends a sentence, not a number.
std::string read_number(const std::string& line, size_t& pos) {
  const size_t begin = pos;
  while (pos < line.size() &&
         (is_digit(line[pos]) || (line[pos] == '.' && pos + 1 < line.size() && is_digit(line[pos + 1]) && pos > begin)))
    ++pos;
  return line.substr(begin, pos - begin);
}

const std::string kSection = "\u00a7";
const std::string kEnDash = "\u2013";

// Skips a range dash ("-", "–", optionally followed by "§") at `pos`, if there is one.
bool skip_range_dash(const std::string& line, size_t& pos) {
  size_t p = pos;
  if (p < line.size() && line[p] == '-') {
    ++p;
  } else if (line.compare(p, kEnDash.size(), kEnDash) == 0) {
    p += kEnDash.size();
  } else {
    return false;
  }
  if (line.compare(p, kSection.size(), kSection) == 0) p += kSection.size();
  if (p >= line.size() || !is_digit(line[p])) return false;
  pos = p;
  return true;
}

std::vector<Citation> take_citations(const std::string& line) {
  std::vector<Citation> out;
  for (size_t at = line.find(kSection); at != std::string::npos; at = line.find(kSection, at + 1)) {
    size_t pos = at + kSection.size();
    while (pos < line.size() && line[pos] == ' ')
      ++pos;
    Citation citation{at, {read_number(line, pos)}};
    if (citation.sections[0].empty()) continue;
    if (skip_range_dash(line, pos)) citation.sections.push_back(read_number(line, pos));
    out.push_back(citation);
  }
  return out;
}

// ---- source paths in prose --------------------------------------------------------------------

bool is_placeholder_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
}

// The end of a placeholder "<area>" at `at`; `at` itself when none starts there.
size_t placeholder_end(const std::string& line, size_t at) {
  if (line[at] != '<') return at;
  size_t end = at + 1;
  while (end < line.size() && is_placeholder_char(line[end]))
    ++end;
  return end > at + 1 && end < line.size() && line[end] == '>' ? end + 1 : at;
}

// The end of a brace group "{hpp,cpp}" at `at`; `at` itself when none starts there.
size_t braces_end(const std::string& line, size_t at) {
  if (line[at] != '{') return at;
  size_t end = at + 1;
  while (end < line.size() && (is_path_char(line[end]) || line[end] == ','))
    ++end;
  return end < line.size() && line[end] == '}' ? end + 1 : at;
}

// The end of the path-like token at `at`: path characters and '*', placeholders "<area>", and
// brace groups "{a,b}" inside a token (a '{' that starts one opens code, as in "${DIR}/x").
size_t token_end(const std::string& line, size_t at) {
  size_t end = at;
  while (end < line.size()) {
    size_t next = is_path_char(line[end]) || line[end] == '*' ? end + 1 : placeholder_end(line, end);
    if (next == end && end > at) next = braces_end(line, end);
    if (next == end) break;
    end = next;
  }
  return end;
}

// "timeline.{hpp,cpp}" -> "timeline.hpp", "timeline.cpp"; every group, left to right.
std::vector<std::string> expand_braces(const std::string& path) {
  const size_t open = path.find('{');
  if (open == std::string::npos) return {path};
  const size_t close = path.find('}', open);
  std::vector<std::string> out;
  std::istringstream alternatives(path.substr(open + 1, close - open - 1));
  for (std::string alternative; std::getline(alternatives, alternative, ',');)
    for (const std::string& rest : expand_braces(path.substr(close + 1)))
      out.push_back(path.substr(0, open) + alternative + rest);
  return out;
}

bool has_wildcard(const std::string& path) {
  return path.find_first_of("*<") != std::string::npos;
}

// A mention with wildcards as a regular expression: '*' is any part of one name, "<area>" a
// non-empty part of one name.
std::string pattern_of(const std::string& path) {
  std::string out;
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '*') {
      out += "[^/]*";
    } else if (path[i] == '<') {
      out += "[^/]+";
      i = path.find('>', i);
    } else {
      if (std::string(".+?^$()[]{}|\\").find(path[i]) != std::string::npos) out += '\\';
      out += path[i];
    }
  }
  return out;
}

// A source a line of prose mentions: a path from the root, or a public header in include form.
struct SourceMention {
  bool header = false;  // "wallfacer/<x>/<y>.hpp", found below some */include/
  std::string path;     // without the leading "./" or "/"
};

// The source a path-like token (braces expanded) mentions, if it mentions one. A plain ".md" path
// is left to the page rule, which reads it everywhere and would report it twice.
std::optional<SourceMention> source_mention(std::string token) {
  while (ends_with(token, "."))
    token.pop_back();
  if (starts_with(token, "./")) token.erase(0, 2);
  if (starts_with(token, "/")) token.erase(0, 1);  // source_dir + "/docs/..."
  const bool has_root = std::any_of(kTopFolders.begin(), kTopFolders.end(),
                                    [&](const std::string& folder) { return starts_with(token, folder); });
  if (has_root && (has_source_extension(token) || ends_with(token, "/")) &&
      !(ends_with(token, ".md") && !has_wildcard(token)))
    return SourceMention{false, token};
  if (starts_with(token, kIncludeRoot) && ends_with(token, ".hpp")) return SourceMention{true, token};
  return std::nullopt;
}

// Whether some file of the repository is what the mention names.
bool is_mentioned_file(const Repository& repo, const SourceMention& mention) {
  const std::string& path = mention.path;
  const bool folder = ends_with(path, "/");
  if (!mention.header && !has_wildcard(path)) return folder ? repo.has_folder(path) : repo.has_file(path);
  if (mention.header && !has_wildcard(path))
    return std::any_of(repo.files().begin(), repo.files().end(),
                       [&](const std::string& file) { return ends_with(file, "/include/" + path); });
  const std::regex pattern((mention.header ? ".+/include/" : "") + pattern_of(path) + (folder ? ".+" : ""));
  return std::any_of(repo.files().begin(), repo.files().end(),
                     [&](const std::string& file) { return std::regex_match(file, pattern); });
}

// What a failure says of a mention that names nothing, with the files of the same name, which
// are most often where the mentioned one went.
std::string missing_source(const Repository& repo, const SourceMention& mention) {
  const std::string& path = mention.path;
  std::string what = "`" + path + "` ";
  if (mention.header)
    what += "is no public header (no */include/" + path + ")";
  else if (has_wildcard(path))
    what += "matches no file of the repository";
  else
    what += ends_with(path, "/") ? "is not a folder of the repository" : "is not a file of the repository";
  const std::string name = path.substr(path.rfind('/') + 1);
  std::vector<std::string> same_name;
  for (const std::string& file : repo.files())
    if (!name.empty() && !has_wildcard(name) && (file == name || ends_with(file, "/" + name)))
      same_name.push_back(file);
  if (same_name.empty() || same_name.size() > 3) return what;
  what += " (of that name: ";
  for (size_t i = 0; i < same_name.size(); ++i)
    what += (i ? ", " : "") + same_name[i];
  return what + ")";
}

// ---- one file ---------------------------------------------------------------------------------

const std::array<std::string, 5> kMachineRoots = {"/work/", "/home/", "/root/", "/tmp/", "/Users/"};

// Walks one file line by line and remembers the page that bare "§N" citations refer to.
class FileScan {
 public:
  FileScan(const std::string& path, const Repository& repo) : path_(path), repo_(repo) {
    numbered_ = !repo_.sections_of(path_).empty();
    if (numbered_) context_ = path_;
  }

  void references(int number, std::string line) {
    blank_urls(line);
    std::vector<Reference> refs = take_links(line, path_, repo_);
    for (Reference& ref : take_paths(line, repo_))
      refs.push_back(ref);
    std::sort(refs.begin(), refs.end(), [](const Reference& a, const Reference& b) { return a.begin < b.begin; });
    for (const Reference& ref : refs)
      if (!ref.found) add(number, "`" + ref.written + "` is not a file of the repository" + hint(ref));
    for (const Citation& citation : take_citations(line))
      cite(number, line, refs, citation);
    for (const Reference& ref : refs)
      if (!numbered_ && ref.found && !repo_.sections_of(ref.target).empty()) context_ = ref.target;
  }

  void machine_paths(int number, std::string text) {
    blank_urls(text);
    for (const std::string& root : kMachineRoots)
      for (size_t at = text.find(root); at != std::string::npos; at = text.find(root, at + 1))
        if (at == 0 || !is_path_char(text[at - 1])) add(number, "absolute path of one machine: " + token_at(text, at));
  }

  // Source paths and headers mentioned in the line's prose. Markdown links are left out: their
  // targets are read, from the citing file's folder, by references().
  void source_paths(int number, std::string text) {
    blank_urls(text);
    take_links(text, path_, repo_);
    for (size_t at = 0; at < text.size();) {
      const size_t end = token_end(text, at);
      if (end == at) {
        ++at;
        continue;
      }
      for (const std::string& token : expand_braces(text.substr(at, end - at)))
        if (const auto mention = source_mention(token); mention && !is_mentioned_file(repo_, *mention))
          add(number, missing_source(repo_, *mention));
      at = end;
    }
  }

  std::vector<Finding> findings() && { return std::move(findings_); }

 private:
  static std::string hint(const Reference& ref) {
    if (ref.target.empty()) return " (it climbs out of the repository)";
    return ref.link ? " (a link resolves from the citing file's folder, here to " + ref.target + ")"
                    : " (outside links a path is read from the repository root)";
  }

  static std::string token_at(const std::string& text, size_t at) {
    size_t end = at;
    while (end < text.size() && !std::isspace(static_cast<unsigned char>(text[end])) &&
           std::string("\"'`)]>,;").find(text[end]) == std::string::npos)
      ++end;
    return text.substr(at, end - at);
  }

  // The reference on the citation's own line that it belongs to: the nearest one before it to a
  // page with numbered sections, else one right in front of it (only blanks and punctuation in
  // between). Without one, cite() falls back to the page in context.
  const Reference* reference_on_line(const std::string& line, const std::vector<Reference>& refs,
                                     const Citation& citation) const {
    const Reference* numbered = nullptr;
    const Reference* nearest = nullptr;
    for (const Reference& ref : refs) {
      if (ref.end > citation.column) break;
      nearest = &ref;
      if (ref.found && !repo_.sections_of(ref.target).empty()) numbered = &ref;
    }
    if (numbered) return numbered;
    if (!nearest) return nullptr;
    const std::string between = line.substr(nearest->end, citation.column - nearest->end);
    const bool adjacent = std::none_of(between.begin(), between.end(),
                                       [](char c) { return std::isalpha(static_cast<unsigned char>(c)); });
    return adjacent ? nearest : nullptr;
  }

  void cite(int number, const std::string& line, const std::vector<Reference>& refs, const Citation& citation) {
    const Reference* ref = reference_on_line(line, refs, citation);
    if (ref && !ref->found) return;  // the broken reference is reported already
    const std::string page = ref ? ref->target : context_;
    const std::string shown = kSection + citation.sections[0];
    if (page.empty()) {
      add(number, shown + " names no page: write docs/algorithms.md " + shown + " or docs/hardware.md " + shown);
      return;
    }
    const std::set<std::string>& sections = repo_.sections_of(page);
    if (sections.empty()) {
      add(number, shown + " cites " + page + ", which has no numbered sections");
      return;
    }
    for (const std::string& section : citation.sections)
      if (!sections.count(section)) add(number, kSection + section + " is not a numbered heading of " + page);
  }

  void add(int number, std::string what) { findings_.push_back({path_, number, std::move(what)}); }

  std::string path_;
  const Repository& repo_;
  bool numbered_ = false;  // a page that numbers its sections: bare citations are its own
  std::string context_;
  std::vector<Finding> findings_;
};

// ---- listing the repository --------------------------------------------------------------------

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The files git knows in `root` (tracked, and untracked but not ignored), or nothing without git.
std::optional<std::vector<std::string>> git_files(const fs::path& root) {
  const std::string command =
      "git -C " + shell_quote(root.string()) + " ls-files -z --cached --others --exclude-standard 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return std::nullopt;
  std::string out;
  std::array<char, 4096> buffer;
  for (size_t n; (n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0;)
    out.append(buffer.data(), n);
  if (pclose(pipe) != 0 || out.empty()) return std::nullopt;
  std::vector<std::string> files;
  std::istringstream in(out);
  for (std::string name; std::getline(in, name, '\0');)
    files.push_back(name);
  return files;
}

// Without git: every file under `root`, skipping .git, caches and top-level build folders.
std::vector<std::string> walked_files(const fs::path& root) {
  std::vector<std::string> files;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    const std::string name = it->path().filename().string();
    const bool top = it.depth() == 0;
    if (it->is_directory() &&
        (name == ".git" || name == ".cache" || (top && (starts_with(name, "build") || name == "out")))) {
      it.disable_recursion_pending();
    } else if (it->is_regular_file()) {
      files.push_back(fs::relative(it->path(), root).generic_string());
    }
  }
  return files;
}

}  // namespace

std::string to_string(const Finding& finding) {
  return finding.file + ":" + std::to_string(finding.line) + ": " + finding.what;
}

Repository::Repository(std::set<std::string> files, std::map<std::string, std::set<std::string>> sections)
    : files_(std::move(files)), sections_(std::move(sections)) {}

Repository Repository::load(const fs::path& root) {
  std::vector<std::string> listed = git_files(root).value_or(std::vector<std::string>{});
  if (listed.empty()) listed = walked_files(root);
  std::set<std::string> files;
  std::map<std::string, std::set<std::string>> sections;
  for (const std::string& file : listed) {
    if (!fs::is_regular_file(root / file)) continue;  // deleted in the working tree
    files.insert(file);
    if (ends_with(file, ".md")) sections[file] = numbered_headings(read_file(root / file));
  }
  return Repository(std::move(files), std::move(sections));
}

bool Repository::has_folder(const std::string& folder) const {
  const auto it = files_.lower_bound(folder);
  return it != files_.end() && starts_with(*it, folder);
}

const std::set<std::string>& Repository::sections_of(const std::string& page) const {
  static const std::set<std::string> none;
  const auto it = sections_.find(page);
  return it == sections_.end() ? none : it->second;
}

std::set<std::string> numbered_headings(const std::string& markdown) {
  std::set<std::string> out;
  bool fenced = false;
  for (const std::string& line : split_lines(markdown)) {
    if (starts_with(line, "```")) fenced = !fenced;
    if (fenced || !starts_with(line, "#")) continue;
    size_t pos = line.find_first_not_of('#');
    if (pos == std::string::npos || pos > 6 || line[pos] != ' ') continue;
    ++pos;
    const std::string number = read_number(line, pos);
    if (!number.empty() && (pos == line.size() || line[pos] == ' ' || line[pos] == '.')) out.insert(number);
  }
  return out;
}

bool is_scanned(const std::string& path) {
  for (const char* ext : {".md", ".cpp", ".hpp", ".h", ".yaml", ".cmake", ".sh"})
    if (ends_with(path, ext)) return true;
  return path == "CMakeLists.txt" || ends_with(path, "/CMakeLists.txt");
}

std::vector<Finding> scan(const std::string& path, const std::string& text, const Repository& repo) {
  FileScan file(path, repo);
  const std::vector<std::string> lines = split_lines(text);
  const std::vector<std::string> scope = prose_scope(path, text);
  for (size_t i = 0; i < lines.size(); ++i)
    file.references(static_cast<int>(i) + 1, lines[i]);
  for (size_t i = 0; i < scope.size(); ++i) {
    file.machine_paths(static_cast<int>(i) + 1, scope[i]);
    file.source_paths(static_cast<int>(i) + 1, scope[i]);
  }
  std::vector<Finding> findings = std::move(file).findings();
  std::stable_sort(findings.begin(), findings.end(),
                   [](const Finding& a, const Finding& b) { return a.line < b.line; });
  return findings;
}

}  // namespace wallfacer::docs_check
