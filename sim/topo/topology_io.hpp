#pragma once
// Loads a topology YAML file (format: topologies/README.md, `parmsim --help-config`).
// `overrides` are "key.path=value" assignments applied before parsing, so a
// parameter such as the node count or a fat-tree's oversubscription can be
// changed from the command line without editing the file.
#include <string>
#include <vector>

#include "sim/topo/topology.hpp"

namespace parmsim {

Topology load_topology(const std::string& file, const std::vector<std::string>& overrides = {});
Topology parse_topology_text(const std::string& text, const std::string& name,
                             const std::vector<std::string>& overrides = {});

}  // namespace parmsim
