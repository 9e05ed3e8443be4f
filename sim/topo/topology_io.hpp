#pragma once
// Loads a topology YAML file (format: topologies/README.md, `parmsim --help-config`).
// `overrides` are "key.path=value" assignments applied before parsing, so a
// parameter such as the node count or a fat-tree's oversubscription can be
// changed from the command line without editing the file.
#include <string>
#include <vector>

#include "sim/topo/topology.hpp"

namespace parmsim {

// `overlay`: "key.path=value" assignments applied before `overrides`, which
// may add keys and maps the file lacks (nccl.launch on a file without an
// `nccl` map); unknown keys are still refused when the topology is read.
Topology load_topology(const std::string& file, const std::vector<std::string>& overrides = {},
                       const std::vector<std::string>& overlay = {});
Topology parse_topology_text(const std::string& text, const std::string& name,
                             const std::vector<std::string>& overrides = {},
                             const std::vector<std::string>& overlay = {});

// A topology overlay file (`--overlay FILE`; `parmsim calibrate --fit-machine`
// writes one): a YAML map of topology keys, nested (`nccl: {launch: 14us}`) or
// dotted (`nccl.launch: 14us`), merged over the topology. Returns its
// assignments ("nccl.launch=14us"), for `overlay` above. Throws UserError
// naming file:line for anything but a map of single values.
std::vector<std::string> load_topology_overlay(const std::string& file);
// The same from text (the fuzz targets); `name` stands for the file in messages.
std::vector<std::string> parse_topology_overlay_text(const std::string& text, const std::string& name);

}  // namespace parmsim
