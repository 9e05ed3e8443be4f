#include "sim/io/yaml_reader.hpp"

#include <yaml-cpp/eventhandler.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string_view>
#include <vector>

#include "sim/core/error.hpp"
#include "sim/core/units.hpp"
#include "sim/core/utf8.hpp"
#include "sim/io/output.hpp"

namespace parmsim {

std::vector<const Section*>& config_sections() {
  static std::vector<const Section*> s;
  return s;
}

std::string help_config() {
  // Registration follows static initialisation, whose order across translation units the
  // linker decides (it differed between a build with CUDA and one without), so the sections
  // are listed by their root's name; sections of one root keep their order (one translation
  // unit registers them: the mapping first, then its parts).
  auto root = [](const Section* s) { return std::string_view(s->name).substr(0, s->name.find('.')); };
  std::vector<const Section*> sections = config_sections();
  std::stable_sort(sections.begin(), sections.end(),
                   [&](const Section* a, const Section* b) { return root(a) < root(b); });
  std::string out;
  for (const Section* s : sections) {
    out += fmt::format("{}\n  {}\n", s->name, s->help);
    for (const KeyDoc& k : s->keys)
      out += fmt::format("    {:<22} {:<10} {:<12} {}\n", k.key, k.type, k.fallback, k.help);
    out += "\n";
  }
  return out;
}

YamlReader::YamlReader(YAML::Node node, std::string file, std::string path)
    : node_(std::move(node)), file_(std::move(file)), path_(std::move(path)) {}

namespace {

bool ends_with_ci(const std::string& s, const std::string& suffix) {
  if (s.size() < suffix.size()) return false;
  for (std::size_t i = 0; i < suffix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[s.size() - suffix.size() + i])) != suffix[i]) return false;
  return true;
}

// Line and column (1-based) of byte offset `at` in `text`.
std::pair<std::size_t, std::size_t> line_col(const std::string& text, std::size_t at) {
  std::size_t line = 1, col = 1;
  for (std::size_t i = 0; i < at && i < text.size(); ++i) {
    if (text[i] == '\n')
      ++line, col = 1;
    else
      ++col;
  }
  return {line, col};
}

// A .json file is JSON: yaml-cpp would read `[1, 2,]` or `{"a": 1,}` (valid
// YAML flow style) without a word, so JSON syntax is checked first.
void check_json_syntax(const std::string& text, const std::string& name) {
  try {
    const nlohmann::json parsed = nlohmann::json::parse(text);
    (void)parsed;
  } catch (const nlohmann::json::parse_error& e) {
    const auto [line, col] = line_col(text, e.byte > 0 ? e.byte - 1 : 0);
    std::string msg = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 9: syntax error ..." -> "syntax error ..."
    if (const auto c = msg.find(", column "); c != std::string::npos)
      if (const auto colon = msg.find(": ", c); colon != std::string::npos) msg = msg.substr(colon + 2);
    throw UserError(fmt::format("{}:{}:{}: malformed JSON: {}", name, line, col, msg));
  } catch (const nlohmann::json::out_of_range& e) {
    // A number beyond a double (1e999) is out_of_range.406, "number overflow parsing '1e999'",
    // without its place: the first occurrence of that text is where it is.
    const std::string msg = e.what();
    const auto q = msg.find('\'');
    const std::string number = q == std::string::npos ? msg : msg.substr(q + 1, msg.rfind('\'') - q - 1);
    const auto at = text.find(number);
    const auto [line, col] = line_col(text, at == std::string::npos ? 0 : at);
    throw UserError(fmt::format("{}:{}:{}: malformed JSON: number out of range: {}", name, line, col, number));
  }
}

// The documents of a YAML stream, parsed event by event: whether one after the
// first holds anything, and a document that starts where the previous one did.
// That is a token no node can start with (a ',' outside brackets, as in ", x"):
// yaml-cpp 0.7 reports nothing and its LoadAll returns an empty document there
// again and again, growing without end (yaml-cpp issue 1040), so the stream is
// checked with its Parser before anything is loaded.
//
// The same scan bounds aliases, for every loader that walks the tree: an
// alias inside the node it names (`&x {a: *x}`) would be walked without end,
// and aliases of aliases ("billion laughs") expand exponentially. Each node's
// size counts the nodes it expands to; a document past kMaxExpandedNodes is refused.
constexpr std::uint64_t kMaxExpandedNodes = std::uint64_t{1} << 22;

struct DocumentScan : YAML::EventHandler {
  explicit DocumentScan(const std::string& name) : name_(name) {}
  YAML::Mark start, root;  // where the document and its root node start
  bool empty = true;       // the root is null
  int events = 0;
  void OnDocumentStart(const YAML::Mark& m) override {
    start = m, root = m, empty = true, events = 0;
    open_.clear(), size_of_.clear(), total_ = 0;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& m, YAML::anchor_t a) override { leaf(m, a, true); }
  void OnAlias(const YAML::Mark& m, YAML::anchor_t a) override {
    node(m, false);
    for (const Open& o : open_)
      if (o.anchor == a)
        throw UserError(fmt::format("{}:{}:{}: an alias inside the node it names (a self-reference, which would "
                                    "never end); copy the values instead",
                                    name_, m.line + 1, m.column + 1));
    const auto it = size_of_.find(a);
    add(m, it == size_of_.end() ? 1 : it->second);
  }
  void OnScalar(const YAML::Mark& m, const std::string&, YAML::anchor_t a, const std::string&) override {
    leaf(m, a, false);
  }
  void OnSequenceStart(const YAML::Mark& m, const std::string&, YAML::anchor_t a, YAML::EmitterStyle::value) override {
    node(m, false);
    open_.push_back({a, 1, m});
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark& m, const std::string&, YAML::anchor_t a, YAML::EmitterStyle::value) override {
    node(m, false);
    open_.push_back({a, 1, m});
  }
  void OnMapEnd() override { close(); }

 private:
  struct Open {
    YAML::anchor_t anchor;
    std::uint64_t size;  // nodes it expands to so far, itself included
    YAML::Mark mark;
  };
  void node(const YAML::Mark& m, bool null) {
    if (events++ == 0) root = m, empty = null;
  }
  void leaf(const YAML::Mark& m, YAML::anchor_t a, bool null) {
    node(m, null);
    if (a != YAML::NullAnchor) size_of_[a] = 1;
    add(m, 1);
  }
  void close() {
    const Open o = open_.back();
    open_.pop_back();
    if (o.anchor != YAML::NullAnchor) size_of_[o.anchor] = o.size;
    add(o.mark, o.size);
  }
  // `n` more nodes in the innermost open node (or the document).
  void add(const YAML::Mark& m, std::uint64_t n) {
    std::uint64_t& s = open_.empty() ? total_ : open_.back().size;
    s += n;
    if (s > kMaxExpandedNodes)
      throw UserError(fmt::format("{}:{}:{}: aliases expand the document past {} nodes (aliases of aliases grow "
                                  "exponentially); copy fewer levels",
                                  name_, m.line + 1, m.column + 1, kMaxExpandedNodes));
  }
  const std::string& name_;
  std::vector<Open> open_;
  std::map<YAML::anchor_t, std::uint64_t> size_of_;
  std::uint64_t total_ = 0;
};

void check_documents(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentScan scan(name);
  int documents = 0, last = -1;
  while (parser.HandleNextDocument(scan)) {
    const YAML::Mark m = scan.start;
    if (m.pos == last) {
      const char c = m.pos >= 0 && static_cast<std::size_t>(m.pos) < text.size() ? text[m.pos] : ' ';
      throw UserError(fmt::format("{}:{}:{}: malformed YAML: '{}' cannot start a value", name, m.line + 1,
                                  m.column + 1, std::string(1, c)));
    }
    last = m.pos;
    if (documents++ > 0 && !scan.empty)
      throw UserError(fmt::format("{}:{}:{}: a second YAML document (after '---'); a file holds one", name,
                                  scan.root.line + 1, scan.root.column + 1));
  }
}

// yaml-cpp keeps both entries of a repeated key and lookups see the first:
// every mapping of the document is checked. Aliased nodes are walked once.
void check_duplicate_keys(const YAML::Node& root, const std::string& name) {
  std::set<std::pair<int, int>> walked;  // (position, type): a node's identity in the text
  std::vector<std::pair<YAML::Node, std::string>> stack{{root, ""}};
  while (!stack.empty()) {
    const YAML::Node n = stack.back().first;
    const std::string path = stack.back().second;
    stack.pop_back();
    if (!n.IsMap() && !n.IsSequence()) continue;
    if (!walked.insert({n.Mark().pos, static_cast<int>(n.Type())}).second) continue;
    if (n.IsSequence()) {
      std::size_t i = 0;
      for (auto it = n.begin(); it != n.end(); ++it, ++i) stack.emplace_back(*it, fmt::format("{}[{}]", path, i));
      continue;
    }
    std::map<std::string, YAML::Mark> seen;
    for (auto it = n.begin(); it != n.end(); ++it) {
      const std::string k = it->first.IsScalar() ? it->first.Scalar() : std::string();
      const std::string kp = path.empty() ? k : path + "." + k;
      if (it->first.IsScalar()) {
        const auto [first, fresh] = seen.emplace(k, it->first.Mark());
        if (!fresh) {
          const YAML::Mark m = it->first.Mark();
          throw UserError(fmt::format("{}:{}:{}: duplicate key '{}' (first at line {}); a key may appear once", name,
                                      m.line + 1, m.column + 1, kp, first->second.line + 1));
        }
      }
      stack.emplace_back(it->second, kp);
    }
  }
}

}  // namespace

YamlReader YamlReader::load_file(const std::string& file) {
  std::string text = read_file(file);
  note_input_file(file);
  return load_string(text, file);
}

YamlReader YamlReader::load_string(const std::string& text, const std::string& name) {
  if (const auto bad = utf8_error(text))
    throw UserError(fmt::format("{}:{}: byte 0x{:02X} is not UTF-8; YAML and JSON files are UTF-8 text", name,
                                text_position(text, *bad), static_cast<unsigned char>(text[*bad])));
  if (ends_with_ci(name, ".json")) check_json_syntax(text, name);
  try {
    check_documents(text, name);
    YAML::Node n = YAML::Load(text);
    if (!n || n.IsNull()) throw UserError(fmt::format("{}:1:1: the file is empty; expected a mapping", name));
    check_duplicate_keys(n, name);
    return YamlReader(n, name, "");
  } catch (const YAML::Exception& e) {
    throw UserError(fmt::format("{}:{}:{}: malformed YAML: {}", name, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
}

std::string YamlReader::where() const {
  const YAML::Mark m = node_.Mark();
  if (m.line < 0) return file_ + " (overridden: --topo-set, or a spec's set)";
  return fmt::format("{}:{}:{}", file_, m.line + 1, m.column + 1);
}

void YamlReader::fail(const std::string& expected) const {
  std::string got;
  if (expected.find("got ") != std::string::npos)
    ;  // the reason already quotes the value
  else if (node_.IsScalar())
    got = fmt::format(", got '{}'", excerpt(node_.Scalar()));
  else if (node_.IsSequence())
    got = ", got a list";
  else if (node_.IsMap())
    got = ", got a mapping";
  throw UserError(
      fmt::format("{}: key '{}': expected {}{}", where(), path_.empty() ? "(top level)" : path_, expected, got));
}

void YamlReader::expect_map() const {
  if (!node_.IsMap()) fail("a mapping");
}
void YamlReader::expect_seq() const {
  if (!node_.IsSequence()) fail("a list");
}

void YamlReader::check_keys(const Section& s) const {
  expect_map();
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    const std::string k = it->first.Scalar();
    bool ok = false;
    for (const KeyDoc& d : s.keys) ok = ok || d.key == k;
    if (!ok) {
      std::string allowed;
      for (const KeyDoc& d : s.keys) allowed += (allowed.empty() ? "" : ", ") + d.key;
      const YAML::Mark m = it->first.Mark();
      throw UserError(fmt::format("{}:{}:{}: unknown key '{}{}{}' in {}; allowed keys: {}", file_, m.line + 1,
                                  m.column + 1, path_, path_.empty() ? "" : ".", k, s.name, allowed));
    }
  }
  for (const KeyDoc& d : s.keys)
    if (d.fallback == "required" && !node_[d.key])
      throw UserError(fmt::format("{}: key '{}{}{}' is required ({}: {})", where(), path_, path_.empty() ? "" : ".",
                                  d.key, d.type, d.help));
}

bool YamlReader::has(const std::string& key) const {
  return node_.IsMap() && node_[key];
}

YamlReader YamlReader::at(const std::string& key) const {
  expect_map();
  const std::string p = path_.empty() ? key : path_ + "." + key;
  YAML::Node c = node_[key];
  if (!c) throw UserError(fmt::format("{}: key '{}' is required", where(), p));
  return YamlReader(c, file_, p);
}

std::optional<YamlReader> YamlReader::opt(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  return at(key);
}

std::size_t YamlReader::size() const {
  return node_.size();
}

YamlReader YamlReader::operator[](std::size_t i) const {
  return YamlReader(node_[i], file_, fmt::format("{}[{}]", path_, i));
}

std::vector<std::string> YamlReader::keys() const {
  expect_map();
  std::vector<std::string> out;
  for (auto it = node_.begin(); it != node_.end(); ++it) out.push_back(it->first.Scalar());
  return out;
}

std::string YamlReader::scalar_or_fail(const std::string& expected) const {
  if (!node_.IsScalar()) fail(expected);
  return node_.Scalar();
}

std::string YamlReader::as_string() const {
  return scalar_or_fail("a string");
}

std::int64_t YamlReader::as_int() const {
  const std::string s = scalar_or_fail("an integer");
  try {
    std::size_t used = 0;
    const long long v = std::stoll(s, &used);
    if (used != s.size()) fail("an integer");
    return v;
  } catch (const std::logic_error&) {
    fail("an integer");
  }
}

std::int64_t YamlReader::as_int(std::int64_t lo, std::int64_t hi) const {
  const std::int64_t v = as_int();
  if (v < lo || v > hi) fail(fmt::format("an integer in [{}, {}]", lo, hi));
  return v;
}

double YamlReader::as_double() const {
  const std::string s = scalar_or_fail("a number");
  try {
    std::size_t used = 0;
    const double v = std::stod(s, &used);
    if (used != s.size() || !std::isfinite(v)) fail("a finite number");
    return v;
  } catch (const std::logic_error&) {
    fail("a number");
  }
}

bool YamlReader::as_bool() const {
  const std::string s = scalar_or_fail("true or false");
  if (s == "true") return true;
  if (s == "false") return false;
  fail("true or false");
}

std::uint64_t YamlReader::as_bandwidth() const {
  std::string why;
  auto v = units::parse_bandwidth(scalar_or_fail("a bandwidth such as 450GBps"), &why);
  if (!v) fail(why);
  return *v;
}

Time YamlReader::as_time() const {
  std::string why;
  auto v = units::parse_time(scalar_or_fail("a time such as 2us"), &why);
  if (!v) fail(why);
  return *v;
}

std::uint64_t YamlReader::as_size() const {
  std::string why;
  auto v = units::parse_size(scalar_or_fail("a size such as 64MiB"), &why);
  if (!v) fail(why);
  return *v;
}

double YamlReader::as_flops() const {
  std::string why;
  auto v = units::parse_flops(scalar_or_fail("a rate such as 312TFLOPs"), &why);
  if (!v) fail(why);
  return *v;
}

std::string YamlReader::get_string(const std::string& key, const std::string& def) const {
  return has(key) ? at(key).as_string() : def;
}
std::int64_t YamlReader::get_int(const std::string& key, std::int64_t def) const {
  return has(key) ? at(key).as_int() : def;
}
double YamlReader::get_double(const std::string& key, double def) const {
  return has(key) ? at(key).as_double() : def;
}

void apply_override(YAML::Node root, const std::string& assignment, const std::string& what, bool allow_new,
                    bool create_maps) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) throw UserError(fmt::format("{}: '{}' is not key=value", what, assignment));
  const std::string key = assignment.substr(0, eq);
  const std::string value = assignment.substr(eq + 1);
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const auto dot = key.find('.', start);
    parts.push_back(key.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  // yaml-cpp nodes are handles: walking with operator[] on a copy still
  // writes into `root`'s tree. A numeric part indexes a list ("node.links.0.bandwidth").
  // An index past any list (more digits than a long holds) is LONG_MAX: "has N entries", not an exception.
  auto index_of = [](const std::string& p) -> long {
    if (p.empty() || p.find_first_not_of("0123456789") != std::string::npos) return -1;
    long v = 0;
    const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), v);
    return ec == std::errc() ? v : std::numeric_limits<long>::max();
  };
  std::vector<YAML::Node> chain{root};
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node cur = chain.back();
    const long idx = index_of(parts[i]);
    YAML::Node next;
    if (cur.IsSequence() && idx >= 0) {
      if (static_cast<std::size_t>(idx) >= cur.size())
        throw UserError(fmt::format("{}: '{}': list '{}' has {} entries", what, key, parts[i - (i > 0)], cur.size()));
      next = cur[static_cast<std::size_t>(idx)];
    } else {
      next = cur[parts[i]];
      if (create_maps && allow_new && cur.IsMap() && (!next.IsDefined() || next.IsNull())) {
        cur[parts[i]] = YAML::Node(YAML::NodeType::Map);
        next = cur[parts[i]];
      }
    }
    if (!next.IsMap() && !next.IsSequence())
      throw UserError(fmt::format("{}: '{}' has no mapping or list '{}'", what, key, parts[i]));
    chain.push_back(next);
  }
  YAML::Node parent = chain.back();
  if (!parent.IsMap()) throw UserError(fmt::format("{}: '{}' does not name a key of a mapping", what, key));
  if (!allow_new && !parent[parts.back()]) throw UserError(fmt::format("{}: unknown key '{}'", what, key));
  // A fresh node (no position in the file): errors about it name the override, not the file's line.
  parent[parts.back()] = YAML::Node(value);
}

}  // namespace parmsim
