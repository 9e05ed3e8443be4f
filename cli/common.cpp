#include "cli/common.hpp"

#include <fmt/format.h>

#include <map>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <unistd.h>

#include "cli/coverage.hpp"
#include "sim/calib/calibration.hpp"
#include "sim/core/error.hpp"
#include "sim/core/units.hpp"
#include "sim/net/network_model.hpp"
#include "sim/topo/topology_io.hpp"

namespace parmsim::cli {

static std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const auto p = s.find(sep, start);
    out.push_back(s.substr(start, p - start));
    if (p == std::string::npos) break;
    start = p + 1;
  }
  return out;
}

std::vector<std::uint64_t> parse_sizes(const std::string& s, const std::string& option) {
  auto one = [&option](const std::string& x) {
    std::string why;
    auto v = units::parse_size(x, &why);
    if (!v || *v == 0) throw UserError(fmt::format("{}: expected {}", option, v ? "a size above zero" : why));
    return *v;
  };
  std::vector<std::uint64_t> out;
  if (s.find(':') != std::string::npos) {
    const auto parts = split(s, ':');
    if (parts.size() != 2) throw UserError(fmt::format("{}: expected FROM:TO, got '{}'", option, s));
    const std::uint64_t lo = one(parts[0]), hi = one(parts[1]);
    if (lo > hi) throw UserError(fmt::format("{}: '{}' runs backwards", option, s));
    for (std::uint64_t v = lo; v <= hi; v *= 2) out.push_back(v);
    return out;
  }
  for (const auto& p : split(s, ',')) out.push_back(one(p));
  return out;
}

std::vector<int> parse_ranks(const std::string& s, int limit) {
  std::vector<int> out;
  if (s == "all") {
    for (int i = 0; i < limit; ++i) out.push_back(i);
    return out;
  }
  auto num = [&](const std::string& x) {
    try {
      std::size_t used = 0;
      const int v = std::stoi(x, &used);
      if (used != x.size() || v < 0) throw std::invalid_argument("x");
      if (v >= limit) throw UserError(fmt::format("--gpus: GPU {} does not exist (the topology has {})", v, limit));
      return v;
    } catch (const std::logic_error&) {
      throw UserError(fmt::format("--gpus: expected 'all' or ids like 0-3,8, got '{}'", s));
    }
  };
  std::vector<bool> seen(static_cast<std::size_t>(limit), false);
  auto add = [&](int v) {
    if (seen[v]) throw UserError(fmt::format("--gpus: GPU {} is named twice in '{}'", v, s));
    seen[v] = true;
    out.push_back(v);
  };
  for (const auto& p : split(s, ',')) {
    const auto d = p.find('-');
    if (d == std::string::npos) {
      add(num(p));
    } else {
      const int a = num(p.substr(0, d)), b = num(p.substr(d + 1));
      if (a > b) throw UserError(fmt::format("--gpus: the range '{}' runs backwards (write {}-{})", p, b, a));
      for (int i = a; i <= b; ++i) add(i);
    }
  }
  return out;
}

void add_calibration_option(CLI::App* c, std::string& file) {
  c->add_option("--calibration", file,
                "calibration YAML (parmsim calibrate): measured kernels and collectives replace the modelled ones, in "
                "the simulator and in the alpha-beta model; at the end the command reports which collectives (op, "
                "ranks, placement, sizes) it timed and which fell back to the model (docs/calibration.md)")
      ->check(CLI::ExistingFile);
}

std::shared_ptr<const Calibration> load_calibration_arg(const std::string& file) {
  if (file.empty()) return nullptr;
  auto cal = std::make_shared<const Calibration>(load_calibration(file));
  coverage_watch(cal);  // the command reports what it covered when it ends
  return cal;
}

void add_topo_set_option(CLI::App* c, std::string& set) {
  c->add_option("--topo-set", set,
                "override topology keys, e.g. nodes=16,link_efficiency.network=0.9 (a key the file has, or one with a "
                "default: gpu_memory, cpu, p2p, gdr, compute.*, nccl.*; see --help-config)");
}

void add_overlay_option(CLI::App* c, std::string& file) {
  c->add_option("--overlay", file,
                "topology overlay YAML (parmsim calibrate --fit-machine): fitted link efficiencies and latencies, "
                "merged over the topology before --topo-set")
      ->check(CLI::ExistingFile);
}

std::vector<std::string> load_overlay_arg(const std::string& file) {
  return file.empty() ? std::vector<std::string>{} : load_topology_overlay(file);
}

std::vector<std::string> split_assignments(const std::string& s, const std::string& option) {
  std::vector<std::string> out;
  std::map<std::string, std::string> seen;  // key -> its first assignment
  for (const auto& p : split(s, ',')) {
    if (p.empty()) continue;
    const std::string key = p.substr(0, p.find('='));
    if (const auto [it, fresh] = seen.emplace(key, p); !fresh)
      throw UserError(fmt::format("{}: key '{}' is given twice ({} and {}); give each key once", option, key,
                                  it->second, p));
    out.push_back(p);
  }
  return out;
}

void check_network_option(const std::string& name) {
  if (!is_network_model(name))
    throw UserError(
        fmt::format("--network: unknown network model '{}': expected {}", name, network_model_names(", ", " or ")));
}

CLI::Validator int_in(long long lo, long long hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) -> std::string {
        const std::string want = fmt::format("expected an integer in [{}, {}], got '{}'", lo, hi, v);
        if (v.empty()) return want;
        errno = 0;
        char* end = nullptr;
        const long long x = std::strtoll(v.c_str(), &end, 10);
        if (errno == ERANGE || end != v.c_str() + v.size() || x < lo || x > hi) return want;
        return {};
      },
      fmt::format("in [{}, {}]", lo, hi));
}

CLI::Validator uint64_any() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        const std::string want = fmt::format("expected an integer in [0, {}], got '{}'", UINT64_MAX, v);
        if (v.empty() || v[0] < '0' || v[0] > '9') return want;
        errno = 0;
        char* end = nullptr;
        std::strtoull(v.c_str(), &end, 10);
        if (errno == ERANGE || end != v.c_str() + v.size()) return want;
        return {};
      },
      "");
}

CLI::Validator finite_at_least(double lo) {
  return CLI::Validator(
      [lo](std::string& v) -> std::string {
        const std::string want = fmt::format("expected a finite number >= {:g}, got '{}'", lo, v);
        if (v.empty()) return want;
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        if (end != v.c_str() + v.size() || !std::isfinite(x) || !(x >= lo)) return want;
        return {};
      },
      fmt::format("finite, >= {:g}", lo));
}

void add_no_symmetry_option(CLI::App* c, bool& value) {
  c->add_flag("--no-symmetry", value,
              "simulate every rank: never run one class of symmetric ranks for all (where shifting the servers maps "
              "topology, routes, task graph and plans onto themselves; docs/performance.md, Symmetry), and build "
              "the closed form's collective costs from every transfer; for checks, the results are the same");
}

void add_max_memory_option(CLI::App* c, std::string& value) {
  c->add_option("--max-memory", value,
                "refuse a run estimated to need more memory than this, e.g. 4GiB (default: half of this machine's "
                "memory, or of its cgroup's limit when lower)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            std::string why;
            const auto b = units::parse_size(v, &why);
            if (!b) return fmt::format("expected a size such as 4GiB, got '{}' ({})", v, why);
            if (*b == 0) return fmt::format("expected a positive size such as 4GiB, got '{}'", v);
            return {};
          },
          "SIZE"));
}

void check_estimate(const std::string& what, const moe::SimCost& e, const std::string& max_memory,
                    const std::string& lower) {
  const MemoryLimit lim = memory_limit(max_memory);
  if (e.bytes > static_cast<double>(lim.bytes))
    throw UserError(fmt::format("{} needs an estimated {}, above the {} a run may use ({}); {}", what, moe::describe(e),
                                units::format_bytes(lim.bytes), lim.why, lower));
  if (e.seconds > 60) fmt::print(stderr, "{}: an estimated {}\n", what, moe::describe(e));
}

MemoryLimit memory_limit(const std::string& value) {
  if (!value.empty()) {
    std::string why;
    return {*units::parse_size(value, &why), "--max-memory " + value};
  }
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  std::uint64_t total = pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page)
                                              : std::uint64_t{8} << 30;
  std::string what = "this machine's memory";
  // A container's limit (cgroup v2, then v1), when it is below the machine's.
  for (const char* f : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(f);
    std::string v;
    if (!(in >> v) || v == "max") continue;
    char* end = nullptr;
    const unsigned long long b = std::strtoull(v.c_str(), &end, 10);
    if (end == v.c_str() || *end != 0 || b == 0) continue;
    if (b < total) total = b, what = "this cgroup's memory limit";
    break;
  }
  return {total / 2, fmt::format("half of {}, {}; --max-memory SIZE", what, units::format_bytes(total))};
}

}  // namespace parmsim::cli
