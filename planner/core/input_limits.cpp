#include <wallfacer/core/input_limits.hpp>

#include <fmt/format.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <unordered_map>
#include <vector>

#include <wallfacer/core/errors.hpp>

namespace wallfacer::limits {

int64_t max_input_bytes() {
  const char* env = std::getenv("WALLFACER_MAX_INPUT_MIB");
  if (env == nullptr || *env == '\0') return kDefaultMaxInputBytes;
  char* end = nullptr;
  const long long mib = std::strtoll(env, &end, 10);
  if (*end != '\0' || mib <= 0 || mib > (int64_t{1} << 20))
    throw InputError(fmt::format("WALLFACER_MAX_INPUT_MIB must be a positive number of MiB, got '{}'", env));
  return static_cast<int64_t>(mib) << 20;
}

namespace {

// Length of the UTF-8 sequence starting with `lead`, 0 when `lead` cannot start one.
int utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

[[noreturn]] void not_text(const std::string& text, size_t offset, const std::string& source) {
  const int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(offset), '\n'));
  throw InputError(source, line,
                   fmt::format("not a text YAML file: byte 0x{:02x} at offset {}",
                               static_cast<unsigned>(static_cast<unsigned char>(text[offset])), offset));
}

}  // namespace

void expect_text(const std::string& text, const std::string& source) {
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == 0 || (c < 0x20 && c != '\t' && c != '\n' && c != '\r')) not_text(text, i, source);
    const int n = utf8_length(c);
    if (n == 0 || i + n > text.size()) not_text(text, i, source);
    for (int k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) not_text(text, i, source);
    i += n;
  }
}

namespace {

// Counts nodes as the parser reports them, with each anchored node's expanded size remembered
// so that an alias adds what walking it would cost.
class ShapeScanner : public YAML::EventHandler {
 public:
  explicit ShapeScanner(const std::string& source) : source_(source) {}

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override { leaf(mark, anchor, 1); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    const auto it = size_of_anchor_.find(anchor);
    leaf(mark, 0, it == size_of_anchor_.end() ? 1 : it->second);
  }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor, const std::string&) override {
    leaf(mark, anchor, 1);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open(mark, anchor);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    open(mark, anchor);
  }
  void OnMapEnd() override { close(); }

 private:
  struct Frame {
    YAML::anchor_t anchor;
    int64_t size;
  };

  void add(const YAML::Mark& mark, int64_t n) {
    total_ += n;
    if (total_ > kMaxYamlExpandedNodes)
      throw InputError(source_, mark.line + 1,
                       fmt::format("the document expands to more than {} nodes through YAML aliases (*name); "
                                   "write the repeated parts out or use fewer aliases",
                                   kMaxYamlExpandedNodes));
    if (!stack_.empty()) stack_.back().size += n;
  }
  void leaf(const YAML::Mark& mark, YAML::anchor_t anchor, int64_t n) {
    add(mark, n);
    if (anchor != 0) size_of_anchor_[anchor] = n;
  }
  void open(const YAML::Mark& mark, YAML::anchor_t anchor) {
    if (static_cast<int>(stack_.size()) >= kMaxYamlDepth)
      throw InputError(source_, mark.line + 1,
                       fmt::format("mappings and lists nest deeper than the limit of {} levels", kMaxYamlDepth));
    add(mark, 1);
    stack_.push_back({anchor, 1});
  }
  void close() {
    const Frame frame = stack_.back();
    stack_.pop_back();
    if (!stack_.empty()) stack_.back().size += frame.size - 1;  // the 1 was added at open
    if (frame.anchor != 0) size_of_anchor_[frame.anchor] = frame.size;
  }

  const std::string& source_;
  std::vector<Frame> stack_;
  std::unordered_map<YAML::anchor_t, int64_t> size_of_anchor_;
  int64_t total_ = 0;
};

}  // namespace

void check_yaml_shape(const std::string& text, const std::string& source) {
  std::istringstream in(text);
  ShapeScanner scanner(source);
  try {
    YAML::Parser parser(in);
    parser.HandleNextDocument(scanner);
  } catch (const YAML::Exception&) {
    // Syntax errors are reported by the parse proper, with its message.
  }
}

}  // namespace wallfacer::limits
