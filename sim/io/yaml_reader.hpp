#pragma once
// Strict, typed access to YAML (and JSON, which yaml-cpp also reads).
// Every error names file:line:column, the key path and what was expected.
// A Section declares the keys a mapping may hold once (type, default, help):
// unknown keys are errors, and `parmsim --help-config` prints the sections.
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/core/time.hpp"

namespace parmsim {

struct KeyDoc {
  std::string key;
  std::string type;      // "int", "bandwidth", "time", "size", "string", "list", "map", ...
  std::string fallback;  // default, or "required"
  std::string help;
};

struct Section {
  std::string name;  // "topology.node.links[]"
  std::string help;
  std::vector<KeyDoc> keys;
};

// All sections registered by the loaders, for --help-config.
std::vector<const Section*>& config_sections();
struct SectionRegistrar {
  explicit SectionRegistrar(const Section& s) { config_sections().push_back(&s); }
};
std::string help_config();

class YamlReader {
 public:
  YamlReader(YAML::Node node, std::string file, std::string path);

  // Reads and parses a file; missing or malformed files are UserErrors.
  static YamlReader load_file(const std::string& file);
  static YamlReader load_string(const std::string& text, const std::string& name);

  const YAML::Node& node() const { return node_; }
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }
  std::string where() const;  // "file:line:col"

  void expect_map() const;
  void expect_seq() const;
  // Errors on any key not in `s`, naming the key and the allowed ones.
  void check_keys(const Section& s) const;

  bool has(const std::string& key) const;
  YamlReader at(const std::string& key) const;  // required
  std::optional<YamlReader> opt(const std::string& key) const;
  std::size_t size() const;
  YamlReader operator[](std::size_t i) const;
  std::vector<std::string> keys() const;

  std::string as_string() const;
  std::int64_t as_int() const;
  std::int64_t as_int(std::int64_t lo, std::int64_t hi) const;  // inclusive range
  double as_double() const;
  bool as_bool() const;
  std::uint64_t as_bandwidth() const;
  Time as_time() const;
  std::uint64_t as_size() const;
  double as_flops() const;

  // Convenience: optional key with a default.
  std::string get_string(const std::string& key, const std::string& def) const;
  std::int64_t get_int(const std::string& key, std::int64_t def) const;
  double get_double(const std::string& key, double def) const;

  [[noreturn]] void fail(const std::string& expected) const;

 private:
  std::string scalar_or_fail(const std::string& expected) const;
  YAML::Node node_;
  std::string file_;
  std::string path_;
};

// Applies "a.b.c=value" overrides to a YAML tree; the key path must exist
// (so a typo is reported, never silently added) unless `allow_new` is set.
// `create_maps` (with allow_new): a missing mapping on the path is created
// (a topology overlay sets nccl.launch on a file without an `nccl` map).
void apply_override(YAML::Node root, const std::string& assignment, const std::string& what, bool allow_new,
                    bool create_maps = false);

}  // namespace parmsim
