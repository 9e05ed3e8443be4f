#pragma once
// How point-to-point transfers share the network. Models are registered by
// name (`network_models()`) and made with make_network(). A model never
// advances time: the engine tells it the time, asks when the next transfer
// completes, and collects the transfers that complete then.
//
//   analytical  latency + bytes / bottleneck bandwidth of the route (the
//               alpha-beta model of the Parm paper); a transfer is never
//               slowed, it waits until its rate is free on every link, so k
//               transfers filling one NIC take alpha + k * bytes * beta.
//   flow        every transfer is a flow; after its route latency it shares
//               each link max-min fairly with the others crossing it, and the
//               shares are re-solved whenever a flow starts or finishes.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sim/core/time.hpp"
#include "sim/topo/topology.hpp"

namespace parmsim {

class NetworkModel {
 public:
  virtual ~NetworkModel() = default;
  virtual std::string name() const = 0;
  // Starts transfer `id` of `bytes` along `route` at time `now`; it never
  // runs faster than `cap` bytes/s (0 = no cap). A link listed n times (in a
  // row) counts the flow n times in its share: a flow that stands for n
  // copies on that link (the engine's symmetry, sim/engine/simulator.hpp).
  virtual void start(std::uint64_t id, const RouteView& route, std::uint64_t bytes, Time now, double cap = 0) = 0;
  // Earliest time at which a transfer completes; nullopt when none is in flight.
  virtual std::optional<Time> next_completion() = 0;
  // Advances to `t` (= next_completion()) and appends the ids completing at
  // `t`, in the order their transfers started.
  virtual void complete(Time t, std::vector<std::uint64_t>* done) = 0;
  virtual std::size_t in_flight() const = 0;
};

// The registry of network models: every list of them (help texts, option and
// key checks, errors) comes from here, and tests run every entry.
struct NetworkModelInfo {
  std::string_view name;
  std::string_view help;
  // ws: where the model may keep what outlives one simulation (the flow
  // model's rate memo); null: nothing is kept.
  std::unique_ptr<NetworkModel> (*make)(const Topology& topo, Workspace* ws);
};
std::span<const NetworkModelInfo> network_models();
bool is_network_model(std::string_view name);
// The models' names joined: network_model_names(", ", " or ") = "analytical or flow".
std::string network_model_names(std::string_view sep, std::string_view last);
// The model called `name`; a UserError listing the known ones otherwise.
std::unique_ptr<NetworkModel> make_network(const std::string& name, const Topology& topo, Workspace* ws = nullptr);

}  // namespace parmsim
