#include "sim/sweep/runner.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>
#include <thread>

#include "sim/compute/gpu_profile.hpp"
#include "sim/core/error.hpp"
#include "sim/io/output.hpp"
#include "sim/moe/layer_sim.hpp"
#include "sim/sweep/mpi_shim.hpp"
#include "sim/version.hpp"

namespace parmsim::sweep {

std::string csv_header() {
  return "config,topology,gpus,B,L,M,H,E,k,f,mp,dtype,ds_moe,dispatch,saa,network,schedule,forward_us,backward_us,total_us,model_us,"
         "speedup_vs_baseline,model_speedup_vs_baseline,chosen_by_model,compute_us,exposed_comm_us,"
         "intra_node_bytes,inter_node_bytes\n";
}

namespace {

// The leading columns that identify a configuration (used to check --resume).
std::string key_columns(const Spec& spec, const Config& c) {
  const auto& l = c.layer;
  return fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}", c.index, spec.topologies[c.topology].label,
                     spec.topologies[c.topology].topo->num_gpus(), l.B, l.L, l.M, l.H, l.E, l.k, l.f, l.mp,
                     to_string(l.dtype), moe::to_string(l.ds_moe), moe::to_string(l.dispatch), l.saa_algo,
                     spec.network);
}

}  // namespace

std::string run_config(const Spec& spec, const Config& c) {
  const Topology& topo = *spec.topologies[c.topology].topo;
  const moe::Dims d = moe::make_dims(c.layer, topo.num_gpus(), topo.gpus_per_node());
  moe::AlphaBeta ab = moe::alpha_beta_from_topology(topo);
  ab.calibration = spec.calibration.get();
  const GpuProfile& gpu = gpu_profile(topo.gpu_model());
  const std::string chosen = moe::auto_choice(c.layer, d, ab, gpu);
  const moe::LayerRun run{topo, c.layer, spec.network, spec.calibration.get()};
  std::vector<moe::ScheduleResult> res;
  for (const std::string& n : spec.schedules) res.push_back(moe::run_schedule(run, moe::preset(n)));
  const double base = res.front().total().to_seconds();
  const double base_model = res.front().model_total_s();
  const std::string key = key_columns(spec, c);
  std::string out;
  for (std::size_t i = 0; i < res.size(); ++i) {
    const auto& r = res[i];
    out +=
        fmt::format("{},{},{},{},{},{:.6f},{:.6f},{:.6f},{},{},{},{},{}\n", key, spec.schedules[i], us_exact(r.forward),
                    us_exact(r.backward), us_exact(r.total()), r.model_total_s() * 1e6, base / r.total().to_seconds(),
                    base_model / r.model_total_s(), spec.schedules[i] == chosen ? 1 : 0, us_exact(r.compute_rank0),
                    us_exact(r.exposed_comm()), r.intra_node_bytes, r.inter_node_bytes);
  }
  return out;
}

namespace {

class Progress {
 public:
  Progress(std::size_t total, bool enabled) : total_(total), enabled_(enabled), tty_(::isatty(2) != 0) {}
  void update(std::size_t done, bool final = false) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    const double el = std::chrono::duration<double>(now - start_).count();
    if (!final && el - last_ < (tty_ ? 0.1 : 5.0)) return;
    // ETA from the recent rate (a moving average over reports), not the mean
    // since the start: a grid's configurations get costlier as it goes (larger
    // topologies come last), and the mean rate promised seconds for minutes.
    if (last_ > -1e8 && el > last_ && done >= last_done_) {
      const double inst = static_cast<double>(done - last_done_) / (el - last_);
      rate_ = rate_ > 0 ? 0.7 * rate_ + 0.3 * inst : inst;
    }
    last_ = el;
    last_done_ = done;
    const double mean = el > 0 ? static_cast<double>(done) / el : 0;
    const double rate = rate_ > 0 ? rate_ : mean;
    const double eta = rate > 0 ? static_cast<double>(total_ - done) / rate : 0;
    if (tty_) {
      const int w = 30, fill = total_ ? static_cast<int>(w * done / total_) : w;
      std::fprintf(stderr, "\r[%s%s] %zu/%zu configurations, %.1f s, ETA %.1f s ", std::string(fill, '#').c_str(),
                   std::string(w - fill, '.').c_str(), done, total_, el, eta);
      if (final) std::fprintf(stderr, "\n");
    } else {
      std::fprintf(stderr, "sweep: %zu/%zu configurations, %.1f s elapsed, ETA %.1f s\n", done, total_, el, eta);
    }
  }

 private:
  std::size_t total_;
  bool enabled_, tty_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double last_ = -1e9, rate_ = 0;  // -1e9: the first update prints at once
  std::size_t last_done_ = 0;
};

// Complete configurations at the head of a partial file: returns how many,
// and the byte length they occupy. Throws if a row does not match the spec.
std::pair<std::size_t, std::size_t> scan_partial(const Spec& spec, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {0, 0};
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const std::string header = csv_header();
  if (text.compare(0, header.size(), header) != 0) {
    if (text.size() < header.size()) return {0, 0};
    throw ParmError(fmt::format("{}: its header is not this version's; remove it or run without --resume", path));
  }
  const std::size_t per = spec.schedules.size();
  std::size_t pos = header.size(), configs = 0, rows_in_config = 0, good_end = header.size();
  while (pos < text.size()) {
    const std::size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) break;  // half-written row: dropped
    if (configs >= spec.configs.size()) break;
    const std::string line = text.substr(pos, nl - pos);
    const std::string key = key_columns(spec, spec.configs[configs]);
    if (line.compare(0, key.size(), key) != 0 || line.size() <= key.size() || line[key.size()] != ',')
      throw ParmError(
          fmt::format("{}: row '{}' does not belong to configuration {} of {}: the spec changed; remove "
                      "the file or run without --resume",
                      path, line.substr(0, 60), configs, spec.file));
    pos = nl + 1;
    if (++rows_in_config == per) {
      ++configs;
      rows_in_config = 0;
      good_end = pos;
    }
  }
  return {configs, good_end};
}

void write_run_json(const Spec& spec, const RunOptions& opt, const RunSummary& s) {
  const std::filesystem::path out(opt.out);
  // "<results stem>.run.json": several sweeps can share a folder without
  // overwriting each other's record.
  const std::string path = (out.parent_path() / (out.stem().string() + ".run.json")).string();
  nlohmann::json j = {{"parmsim_version", kVersion},
                      {"spec", spec.file},
                      {"name", spec.name},
                      {"input_hash", fmt::format("fnv1a64:{:016x}", spec.input_hash)},
                      {"network", spec.network},
                      {"calibration", spec.calibration_file},
                      {"schedules", spec.schedules},
                      {"configurations", spec.configs.size()},
                      {"skipped_invalid", spec.skipped},
                      {"rows", spec.configs.size() * spec.schedules.size()},
                      {"results", out.filename().string()},
                      {"threads", opt.threads},
                      {"mpi_ranks", opt.mpi_size},
                      {"resumed_configurations", s.configs_resumed},
                      {"time_unit", "microseconds (exact picoseconds, 6 decimals)"}};
  nlohmann::json tops = nlohmann::json::array();
  for (const auto& t : spec.topologies)
    tops.push_back({{"label", t.label}, {"file", t.file}, {"overrides", t.overrides}, {"gpus", t.topo->num_gpus()}});
  j["topologies"] = tops;
  write_atomically(path, [&](std::ostream& os) { os << j.dump(1) << "\n"; });
}

}  // namespace

RunSummary run_sweep(const Spec& spec, const RunOptions& opt_in) {
  RunOptions opt = opt_in;
  // 0: one thread per core; never more than 4 per core (more only contend).
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  opt.threads = opt.threads <= 0 ? cores : std::min(opt.threads, 4 * cores);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string partial = opt.out + ".partial";
  RunSummary sum;
  const bool root = opt.mpi_rank == 0;

  // Rank 0 decides where to start; everyone learns it.
  std::size_t start = 0, keep_bytes = 0;
  if (root && opt.resume) std::tie(start, keep_bytes) = scan_partial(spec, partial);
  start = mpi::broadcast_size(start);
  sum.configs_resumed = start;

  std::ofstream os;
  if (root) {
    if (opt.resume && start > 0) {
      std::filesystem::resize_file(partial, keep_bytes);
      os.open(partial, std::ios::binary | std::ios::app);
    } else {
      os.open(partial, std::ios::binary | std::ios::trunc);
      os << csv_header();
    }
    if (!os) throw ParmError(fmt::format("{}: cannot write", partial));
    os.flush();
  }

  const std::size_t n = spec.configs.size();
  // This rank's configurations: every mpi_size-th one from `start`.
  std::vector<std::size_t> mine;
  for (std::size_t i = start; i < n; ++i)
    if ((i - start) % static_cast<std::size_t>(opt.mpi_size) == static_cast<std::size_t>(opt.mpi_rank))
      mine.push_back(i);

  std::vector<std::string> rows(n);
  std::vector<char> ready(n, 0);
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<std::size_t> next{0};
  std::exception_ptr failure;
  std::size_t written = start, done_count = 0;
  Progress progress(n - start, opt.progress && root);
  const bool stream = root && opt.mpi_size == 1;

  auto worker = [&] {
    while (true) {
      const std::size_t k = next.fetch_add(1);
      if (k >= mine.size()) return;
      const std::size_t i = mine[k];
      std::string r;
      try {
        r = run_config(spec, spec.configs[i]);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu);
        if (!failure) failure = std::current_exception();
        next = mine.size();
        return;
      }
      std::lock_guard<std::mutex> lk(mu);
      rows[i] = std::move(r);
      ready[i] = 1;
      ++done_count;
      if (stream) {
        // Write the contiguous completed prefix, a whole configuration at a time.
        while (written < n && ready[written]) {
          os << rows[written];
          std::string().swap(rows[written]);
          ++written;
        }
        os.flush();
      }
      progress.update(done_count);
    }
  };
  // No more threads than this rank has configurations. Should the system
  // refuse a thread, the ones started do the work (none started: the error).
  const int want = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(opt.threads), mine.size()));
  std::vector<std::thread> pool;
  try {
    for (int t = 0; t < want; ++t) pool.emplace_back(worker);
  } catch (const std::system_error& e) {
    if (pool.empty()) throw ParmError(fmt::format("sweep: cannot start a thread: {}", e.what()));
  }
  for (auto& th : pool) th.join();
  if (failure) std::rethrow_exception(failure);

  if (opt.mpi_size > 1) {
    // Gather every rank's rows on rank 0, in configuration order.
    std::string blob;
    for (std::size_t i : mine) blob += fmt::format("{}\n{}\n{}", i, rows[i].size(), rows[i]);
    const std::vector<std::string> parts = mpi::gather_strings(blob);
    if (root) {
      for (const std::string& p : parts) {
        std::size_t pos = 0;
        while (pos < p.size()) {
          const std::size_t a = p.find('\n', pos), b = p.find('\n', a + 1);
          const std::size_t idx = std::stoull(p.substr(pos, a - pos)), len = std::stoull(p.substr(a + 1, b - a - 1));
          rows[idx] = p.substr(b + 1, len);
          ready[idx] = 1;
          pos = b + 1 + len;
        }
      }
      for (std::size_t i = start; i < n; ++i) {
        if (!ready[i]) throw ParmError(fmt::format("sweep: configuration {} came back from no MPI rank", i));
        os << rows[i];
      }
      os.flush();
    }
  }
  progress.update(n - start, true);
  sum.configs_run = n - start;
  sum.rows = n * spec.schedules.size();
  if (root) {
    os.close();
    if (!os) throw ParmError(fmt::format("{}: write failed", partial));
    std::filesystem::rename(partial, opt.out);
    sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    write_run_json(spec, opt, sum);
  }
  return sum;
}

}  // namespace parmsim::sweep
