#pragma once
// What users measured, in a plain CSV for `parmsim compare --measured FILE.csv`
// (docs/measured.md; the columns: `parmsim --help-config`, section
// "measured"): one row per measured layer (its keys, topology, schedule and
// what was timed: forward, backward or both) or per measured collective (op,
// ranks over nodes, bytes). Reading checks every row: an unknown column, a
// column the row's kind does not read, a missing value or a time that is no
// measurement is a UserError naming FILE:LINE and the column.
#include <cstdint>
#include <string>
#include <vector>

#include "sim/io/yaml_reader.hpp"

namespace parmsim {

struct MeasuredRow {
  int line = 0;
  std::string where;     // "FILE:LINE"
  std::string name;      // the `name` column, or "FILE:LINE" when empty
  std::string kind;      // layer | collective
  std::string topology;  // resolved: relative to the CSV's folder, or the default
  std::string topo_set, system, layer, schedule, what, op, source;
  int ranks = 0, nodes = 1;
  std::uint64_t bytes = 0;
  double measured_us = 0;
};

const Section& measured_csv_section();

// `dir`: the CSV's folder (relative topology paths start there);
// `default_topology`: for rows whose topology is empty ("" = none: such a row is refused).
std::vector<MeasuredRow> parse_measured_csv(const std::string& text, const std::string& name, const std::string& dir,
                                            const std::string& default_topology);
std::vector<MeasuredRow> read_measured_csv(const std::string& path, const std::string& default_topology);

}  // namespace parmsim
