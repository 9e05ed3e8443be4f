#include "sim/sweep/runner.hpp"

#include "sim/moe/resources.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>
#include <system_error>
#include <thread>

#include "sim/compute/gpu_profile.hpp"
#include "sim/core/error.hpp"
#include "sim/core/report.hpp"
#include "sim/io/csv.hpp"
#include "sim/io/output.hpp"
#include "sim/moe/layer_keys.hpp"
#include "sim/moe/layer_sim.hpp"
#include "sim/moe/memory.hpp"
#include "sim/mpi/mpi_shim.hpp"
#include "sim/version.hpp"

namespace parmsim::sweep {

std::string csv_header() { return csv_header(Spec{}); }

std::string csv_header(const Spec& spec) {
  std::string extra;
  for (const std::string& k : spec.extra_columns) extra += "," + k;
  return std::string("config,topology,") + (spec.cases.empty() ? "" : "case,") + "gpus," +
         moe::layer_key_columns(",") + extra +
         ",network,schedule,forward_us,backward_us,total_us,model_us,"
         "speedup_vs_baseline,model_speedup_vs_baseline,chosen_by_model,compute_us,exposed_comm_us,"
         "intra_node_bytes,inter_node_bytes,peak_memory_bytes,fits\n";
}

namespace {
// The rows a configuration writes: one per schedule, less those skip_oom leaves out
// (the memory model alone decides, without simulating).
std::size_t rows_of(const Spec& spec, const Config& c) {
  if (!spec.skip_oom) return spec.schedules.size();
  const Topology& topo = *spec.topologies[c.topology].topo;
  const moe::Dims d = moe::make_dims(c.layer, topo.num_gpus(), topo.gpus_per_node());
  std::size_t n = 0;
  for (const std::string& s : spec.schedules) {
    const auto fops = moe::forward_ops(c.layer, d, moe::schedule_options(s, c.keys));
    n += moe::peak_memory(fops, c.layer, d).peak() <= topo.gpu_memory() ? 1 : 0;
  }
  return n;
}

// The leading columns that identify a configuration (used to check --resume).
std::string key_columns(const Spec& spec, const Config& c) {
  std::string extra;
  for (const std::string& k : spec.extra_columns)
    extra.append(",").append(csv_field(moe::find_layer_key(k)->get(c.layer, moe::ScheduleOptions{})));
  std::string label = csv_field(spec.topologies[c.topology].label);
  if (c.case_index >= 0) label.append(",").append(csv_field(spec.cases[c.case_index].label));
  return fmt::format("{},{},{},{}{},{}", c.index, label, spec.topologies[c.topology].topo->num_gpus(),
                     moe::layer_key_values(c.layer, ","), extra, spec.network);
}

}  // namespace

namespace {
std::string run_config_unnamed(const Spec& spec, const Config& c, const moe::AlphaBeta* model, Workspace* ws);
}  // namespace

std::string run_config(const Spec& spec, const Config& c, const moe::AlphaBeta* model, Workspace* ws) {
  try {
    return run_config_unnamed(spec, c, model, ws);
  } catch (const TimeOverflow& e) {
    // The row whose sizes overflowed (a calibration entry, when it is the cause, is named inside).
    const std::string row = fmt::format("sweep row {} (topology {}, {})", c.index, spec.topologies[c.topology].label,
                                        moe::spec_string(c.layer));
    throw TimeOverflow(fmt::format("{}: {}", row, e.what()), e.cause().empty() ? row : e.cause());
  }
}

namespace {
std::string run_config_unnamed(const Spec& spec, const Config& c, const moe::AlphaBeta* model, Workspace* ws) {
  const Topology& topo = *spec.topologies[c.topology].topo;
  const moe::Dims d = moe::make_dims(c.layer, topo.num_gpus(), topo.gpus_per_node());
  Workspace fresh;
  if (!ws) ws = &fresh;
  moe::AlphaBeta own;
  if (!model) {
    own = moe::alpha_beta_from_topology(topo, ws, spec.symmetry);
    own.calibration = spec.calibration.get();
    model = &own;
  }
  const GpuProfile& gpu = topo.gpu();
  const std::string chosen = moe::auto_choice(c.layer, d, *model, gpu);
  moe::LayerRun run{topo, c.layer, spec.network, spec.calibration.get(), model, ws};
  run.symmetry = spec.symmetry;
  std::vector<moe::ScheduleResult> res;
  for (const std::string& n : spec.schedules) res.push_back(moe::run_schedule(run, moe::schedule_options(n, c.keys)));
  const double base = res.front().total().to_seconds();
  const double base_model = res.front().model_total_s();
  const std::string key = key_columns(spec, c);
  // Schedule options from the grid name the schedule they refined: s1[chunks=2;split=after_order]
  // (';' between them keeps the CSV's columns).
  std::string options;
  for (const std::string& kv : c.keys.given) options += (options.empty() ? "" : ";") + kv;
  std::string out;
  for (std::size_t i = 0; i < res.size(); ++i) {
    const auto& r = res[i];
    if (spec.skip_oom && !r.fits) continue;  // left out, counted in run.json (skipped_oom)
    out +=
        fmt::format("{},{},{},{},{},{:.6f},{:.6f},{:.6f},{},{},{},{},{},{},{}\n", key,
                    csv_field(spec.schedules[i] + (options.empty() ? "" : "[" + options + "]")), us_exact(r.forward),
                    us_exact(r.backward), us_exact(r.total()), r.model_total_s() * 1e6, base / r.total().to_seconds(),
                    base_model / r.model_total_s(), spec.schedules[i] == chosen ? 1 : 0, us_exact(r.compute_rank0),
                    us_exact(r.exposed_comm()), r.intra_node_bytes, r.inter_node_bytes, r.peak_memory_bytes,
                    r.fits ? 1 : 0);
  }
  return out;
}
}  // namespace

namespace {

}  // namespace

std::vector<int> symmetry_orders(const Spec& spec) {
  std::vector<int> o;
  for (const auto& t : spec.topologies) o.push_back(moe::symmetry_order(*t.topo, spec.network, spec.symmetry));
  return o;
}

moe::SimCost config_cost(const Spec& spec, const Config& c, const std::vector<int>& orders) {
  const auto t = static_cast<std::size_t>(c.topology);
  const Topology& topo = *spec.topologies[t].topo;
  const moe::Dims d = moe::make_dims(c.layer, topo.num_gpus(), topo.gpus_per_node());
  moe::SimCost cost;
  for (const std::string& n : spec.schedules)
    cost += moe::with_symmetry(moe::estimate_schedule(c.layer, d, moe::schedule_options(n, c.keys)),
                               moe::layer_symmetry_order(c.layer, d, orders.at(t)));
  return cost;
}

namespace {

// A configuration's estimated cost in seconds (config_cost), never 0.
double config_weight(const Spec& spec, const Config& c, const std::vector<int>& orders) {
  return std::max(config_cost(spec, c, orders).seconds, 1e-9);
}

class Progress {
 public:
  // total: configurations; total_weight: their estimated cost (config_weight), which the ETA follows.
  Progress(std::size_t total, double total_weight, bool enabled)
      : total_(total), total_w_(total_weight), enabled_(enabled), tty_(::isatty(2) != 0) {}
  void update(std::size_t done, double done_w, bool final = false) {
    if (!enabled_) return;
    done = std::min(done, total_);
    const auto now = std::chrono::steady_clock::now();
    const double el = std::chrono::duration<double>(now - start_).count();
    if (!final && el - last_ < (tty_ ? 0.1 : 5.0)) return;
    // ETA from the recent rate of estimated work done (a moving average over
    // reports): configurations differ in cost by orders of magnitude (a
    // 256-GPU layer against a 32-GPU one), so a count of configurations
    // promised seconds for minutes; the largest run first (run_sweep).
    if (last_ > -1e8 && el > last_ && done_w >= last_w_) {
      const double inst = (done_w - last_w_) / (el - last_);
      rate_ = rate_ > 0 ? 0.7 * rate_ + 0.3 * inst : inst;
    }
    last_ = el;
    last_w_ = done_w;
    const double mean = el > 0 ? done_w / el : 0;
    const double rate = rate_ > 0 ? rate_ : mean;
    const double eta = rate > 0 ? std::max(0.0, total_w_ - done_w) / rate : 0;
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
  double total_w_;
  bool enabled_, tty_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double last_ = -1e9, rate_ = 0, last_w_ = 0;  // -1e9: the first update prints at once
};

// The partial file's first line records what the rows were computed from:
// "#parmsim-sweep-partial " and one line of JSON, {"parmsim": version,
// "inputs": [{"role", "file", "path" (absolute), "fnv1a64"}]}. The CSV (the
// results file's content) follows it; the line is dropped when the results are
// put in place.
constexpr std::string_view kPartialTag = "#parmsim-sweep-partial ";

struct InputFile {
  std::string role, file, abs, hash;
};

std::string file_hash(const std::string& path) {
  return fmt::format("{:016x}", fnv1a(read_file(path)));
}

// Every file the sweep's results depend on: the spec, each topology file and
// overlay (once), each case's layer file, the calibration file.
std::vector<InputFile> input_files(const Spec& spec) {
  std::vector<InputFile> v;
  auto add = [&](const std::string& role, const std::string& file) {
    std::error_code ec;
    std::string abs = std::filesystem::absolute(file, ec).lexically_normal().string();
    if (ec) abs = file;
    for (const InputFile& f : v)
      if (f.abs == abs) return;
    v.push_back({role, file, abs, file_hash(file)});
  };
  add("sweep spec", spec.file);
  for (const Case& c : spec.cases)
    if (!c.file.empty()) add("layer", c.file);
  for (const auto& t : spec.topologies) {
    add("topology", t.file);
    if (!t.overlay_file.empty()) add("overlay", t.overlay_file);
  }
  if (!spec.calibration_file.empty()) add("calibration", spec.calibration_file);
  return v;
}

nlohmann::json inputs_json(const std::vector<InputFile>& inputs) {
  nlohmann::json a = nlohmann::json::array();
  for (const InputFile& f : inputs) a.push_back({{"role", f.role}, {"file", f.file}, {"path", f.abs}, {"fnv1a64", f.hash}});
  return a;
}

std::string partial_first_line(const std::vector<InputFile>& inputs) {
  const nlohmann::json j = {{"parmsim", kVersion}, {"inputs", inputs_json(inputs)}};
  return std::string(kPartialTag) + j.dump() + "\n";
}

// Refuses a partial file whose rows were computed from other inputs than
// this run's (or by another parmsim version), naming the file that changed.
void check_partial_inputs(const std::string& path, const std::string& first, const std::vector<InputFile>& inputs) {
  const std::string again = "remove it or run without --resume";
  if (first.compare(0, kPartialTag.size(), kPartialTag) != 0)
    throw UserError(fmt::format("{}:1: no '{}' line recording the inputs (written by an older parmsim?); {}", path,
                                kPartialTag.substr(0, kPartialTag.size() - 1), again));
  std::string version;
  std::map<std::string, std::pair<std::string, std::string>> rec;  // absolute path -> (file, hash)
  std::vector<std::pair<std::string, std::string>> rec_order;      // (absolute path, role)
  try {
    const nlohmann::json j = nlohmann::json::parse(first.substr(kPartialTag.size()));
    version = j.at("parmsim").get<std::string>();
    for (const auto& f : j.at("inputs")) {
      rec[f.at("path").get<std::string>()] = {f.at("file").get<std::string>(), f.at("fnv1a64").get<std::string>()};
      rec_order.emplace_back(f.at("path").get<std::string>(), f.at("role").get<std::string>());
    }
  } catch (const nlohmann::json::exception&) {
    throw UserError(fmt::format("{}:1: the record of the inputs is damaged; {}", path, again));
  }
  if (version != kVersion)
    throw UserError(fmt::format("{}: written by parmsim {}, this is {}; {}", path, version, kVersion, again));
  for (const InputFile& f : inputs) {
    const auto it = rec.find(f.abs);
    if (it == rec.end())
      throw UserError(fmt::format("{}: the interrupted run did not read {} '{}': the inputs changed; {}", path, f.role,
                                  f.file, again));
    if (it->second.second != f.hash)
      throw UserError(fmt::format(
          "{}: {} '{}' changed since the interrupted run (fnv1a64 {} then, {} now): its rows would mix with new "
          "ones; {}",
          path, f.role, f.file, it->second.second, f.hash, again));
  }
  for (const auto& [abs, role] : rec_order) {
    bool found = false;
    for (const InputFile& f : inputs) found = found || f.abs == abs;
    if (!found)
      throw UserError(fmt::format("{}: the interrupted run also read {} '{}', this one does not; {}", path, role,
                                  rec[abs].first, again));
  }
}

// Complete configurations at the head of a partial file: returns how many,
// and the byte length they occupy (with the first line). Throws if the
// inputs changed or a row does not match the spec.
std::pair<std::size_t, std::size_t> scan_partial(const Spec& spec, const std::string& path, const std::string& text,
                                                 const std::vector<InputFile>& inputs) {
  const std::size_t first_end = text.find('\n');
  if (first_end == std::string::npos) return {0, 0};  // killed before its first line: nothing to keep
  check_partial_inputs(path, text.substr(0, first_end), inputs);
  const std::string header = csv_header(spec);
  const std::size_t head = first_end + 1;
  if (text.compare(head, header.size(), header) != 0) {
    if (text.size() - head < header.size()) return {0, 0};
    throw UserError(fmt::format("{}: its header is not this version's; remove it or run without --resume", path));
  }
  std::size_t pos = head + header.size(), configs = 0, rows_in_config = 0, good_end = pos;
  // Rows per configuration: every schedule's, less those skip_oom leaves out (none at all for some).
  std::size_t per = configs < spec.configs.size() ? rows_of(spec, spec.configs[configs]) : 0;
  auto skip_empty = [&] {
    while (per == 0 && configs < spec.configs.size()) {
      ++configs;
      good_end = pos;
      per = configs < spec.configs.size() ? rows_of(spec, spec.configs[configs]) : 0;
    }
  };
  skip_empty();
  while (pos < text.size()) {
    const std::size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) break;  // half-written row: dropped
    if (configs >= spec.configs.size()) break;
    const std::string line = text.substr(pos, nl - pos);
    const std::string key = key_columns(spec, spec.configs[configs]);
    if (line.compare(0, key.size(), key) != 0 || line.size() <= key.size() || line[key.size()] != ',')
      throw UserError(
          fmt::format("{}: row '{}' does not belong to configuration {} of {}: the spec changed; remove "
                      "the file or run without --resume",
                      path, line.substr(0, 60), configs, spec.file));
    pos = nl + 1;
    if (++rows_in_config == per) {
      ++configs;
      rows_in_config = 0;
      good_end = pos;
      per = configs < spec.configs.size() ? rows_of(spec, spec.configs[configs]) : 0;
      skip_empty();
    }
  }
  return {configs, good_end};
}

void write_all(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw UserError(fmt::format("{}: write failed: {}", path, std::strerror(n < 0 ? errno : ENOSPC)));
    data.remove_prefix(static_cast<std::size_t>(n));
  }
}

std::string read_all(int fd, const std::string& path) {
  std::string text;
  char buf[1 << 16];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw UserError(fmt::format("{}: cannot read: {}", path, std::strerror(errno)));
    if (n == 0) return text;
    text.append(buf, static_cast<std::size_t>(n));
    at += n;
  }
}

// "<results>.run.json", named from the whole output name: sweeps writing
// a.csv and a.tsv into one folder keep their own records.
std::string run_json_path(const std::string& out) {
  return out + ".run.json";
}

// The open, locked partial file (rank 0). flock: a second sweep on the same
// output is refused at start; the kernel drops the lock when the process
// dies, so a killed sweep never blocks the next one.
struct PartialFile {
  std::string path;
  int fd = -1;
  ~PartialFile() {
    if (fd >= 0) ::close(fd);
  }
};

void write_run_json(const Spec& spec, const RunOptions& opt, const RunSummary& s,
                    const std::vector<InputFile>& inputs) {
  const std::filesystem::path out(opt.out);
  const std::string path = run_json_path(opt.out);
  nlohmann::json j = {{"parmsim_version", kVersion},
                      {"spec", spec.file},
                      {"name", spec.name},
                      {"input_hash", fmt::format("fnv1a64:{:016x}", spec.input_hash)},
                      {"network", spec.network},
                      {"calibration", spec.calibration_file},
                      {"schedules", spec.schedules},
                      {"configurations", spec.configs.size()},
                      {"skipped_invalid", spec.skipped},
                      {"skip_oom", spec.skip_oom},
                      {"skipped_oom", s.skipped_oom},
                      {"rows", s.rows},
                      {"results", out.filename().string()},
                      {"threads", opt.threads},
                      {"mpi_ranks", opt.mpi_size},
                      {"resumed_configurations", s.configs_resumed},
                      {"time_unit", "microseconds (exact picoseconds, 6 decimals)"}};
  nlohmann::json tops = nlohmann::json::array();
  for (const auto& t : spec.topologies)
    tops.push_back({{"label", t.label}, {"file", t.file}, {"overrides", t.overrides}, {"gpus", t.topo->num_gpus()}});
  j["topologies"] = tops;
  j["inputs"] = inputs_json(inputs);
  write_atomically(path, [&](std::ostream& os) { os << j.dump(1) << "\n"; });
}

}  // namespace

namespace {

// Rank 0, before anything runs: checks the outputs against the inputs, opens
// and locks OUT.partial, and (with --resume) keeps its complete
// configurations. Returns the first configuration to run.
std::size_t open_partial(const Spec& spec, const RunOptions& opt, const std::vector<InputFile>& inputs,
                         PartialFile* pf) {
  // A companion's name as the output would make one sweep write another's
  // .partial or .run.json (a live sweep's, even: it holds no lock on its run.json).
  for (const std::string_view suffix : {std::string_view(".partial"), std::string_view(".run.json")})
    if (opt.out.size() >= suffix.size() && opt.out.compare(opt.out.size() - suffix.size(), suffix.size(), suffix) == 0)
      throw UserError(
          fmt::format("--output '{}': a name ending in '{}' is a sweep's companion file (X{} beside "
                      "the results X); give the results file's own name",
                      opt.out, suffix, suffix));
  std::vector<NamedPath> ins;
  for (const InputFile& f : inputs) ins.push_back({f.role == "sweep spec" ? "the sweep spec" : "the " + f.role + " file", f.file});
  check_outputs({{"--output", opt.out},
                 {"--output (its .partial file)", pf->path},
                 {"--output (its .run.json file)", run_json_path(opt.out)}},
                ins);
  struct stat st {};
  const bool existed = ::lstat(pf->path.c_str(), &st) == 0;
  make_output_dirs(pf->path);  // -o out/x.csv on a fresh checkout makes out/
  pf->fd = ::open(pf->path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
  if (pf->fd < 0) throw UserError(fmt::format("--output: '{}': cannot open: {}", pf->path, std::strerror(errno)));
  if (::flock(pf->fd, LOCK_EX | LOCK_NB) != 0)
    throw UserError(fmt::format("--output: '{}' is being written by another sweep (it holds '{}'); wait for it to "
                                "finish or give another --output",
                                opt.out, pf->path));
  std::size_t start = 0, keep = 0;
  try {
    if (opt.resume) std::tie(start, keep) = scan_partial(spec, pf->path, read_all(pf->fd, pf->path), inputs);
    const std::string head = start > 0 ? std::string() : partial_first_line(inputs) + csv_header(spec);
    if (::ftruncate(pf->fd, static_cast<off_t>(start > 0 ? keep : 0)) != 0 ||
        ::lseek(pf->fd, 0, SEEK_END) < 0)
      throw UserError(fmt::format("{}: cannot truncate: {}", pf->path, std::strerror(errno)));
    write_all(pf->fd, head, pf->path);
  } catch (...) {
    if (!existed) ::unlink(pf->path.c_str());  // ours, and empty
    throw;
  }
  return start;
}

// The results file: the partial file without its first line.
void copy_results(int fd, const std::string& partial, std::ostream& os) {
  char buf[1 << 16];
  bool first_line = true;
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw UserError(fmt::format("{}: cannot read: {}", partial, std::strerror(errno)));
    if (n == 0) return;
    at += n;
    std::size_t from = 0;
    if (first_line) {
      const char* nl = static_cast<const char*>(std::memchr(buf, '\n', static_cast<std::size_t>(n)));
      if (!nl) continue;
      from = static_cast<std::size_t>(nl - buf) + 1;
      first_line = false;
    }
    os.write(buf + from, static_cast<std::streamsize>(static_cast<std::size_t>(n) - from));
  }
}

// A failure as one rank sends it to rank 0: 'U' (the user's) or 'I'
// (parmsim's), then the message.
std::string failure_text(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const UserError& u) {
    return std::string("U") + u.what();
  } catch (const std::exception& x) {
    return std::string("I") + x.what();
  } catch (...) {
    return "Ian exception that is not a std::exception";
  }
}

// Prints a failure_text as the command's error lines would (main prints
// nothing after a ReportedElsewhere).
void print_failure(const std::string& text) {
  std::fputs(error_lines(text[0] != 'U', text.substr(1)).c_str(), stderr);
  std::fflush(stderr);
}

}  // namespace

int sweep_threads(int asked) {
  // 0: one thread per core; never more than 4 per core (more only contend).
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return asked <= 0 ? cores : std::min(asked, 4 * cores);
}

RunSummary run_sweep(const Spec& spec, const RunOptions& opt_in) {
  RunOptions opt = opt_in;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int asked = opt.threads;
  opt.threads = sweep_threads(asked);
  const auto t0 = std::chrono::steady_clock::now();
  RunSummary sum;
  const bool root = opt.mpi_rank == 0;
  if (asked > opt.threads && opt.progress && root)
    fmt::print(stderr, "sweep: --jobs {} capped to {} threads (4 per core on {} cores)\n", asked, opt.threads, cores);
  PartialFile pf;
  pf.path = opt.out + ".partial";

  // Rank 0 decides where to start; everyone learns it (or that it failed).
  constexpr std::size_t kFailed = static_cast<std::size_t>(-1);
  std::size_t start = 0;
  std::vector<InputFile> inputs;
  std::exception_ptr root_failure;
  if (root) {
    try {
      inputs = input_files(spec);
      start = open_partial(spec, opt, inputs, &pf);
    } catch (...) {
      root_failure = std::current_exception();
      start = kFailed;
    }
  }
  // Under mpirun rank 0 says why now, before the broadcast lets the other ranks
  // exit: mpirun ends the job at the first non-zero exit.
  if (root_failure && opt.mpi_size > 1) print_failure(failure_text(root_failure));
  start = mpi::broadcast_size(start);
  if (root_failure && opt.mpi_size == 1) std::rethrow_exception(root_failure);
  if (start == kFailed) throw ReportedElsewhere("sweep: MPI rank 0 could not start the sweep");
  sum.configs_resumed = start;

  const std::size_t n = spec.configs.size();
  std::size_t written = start;  // complete configurations in the partial file
  try {
    // Each configuration's estimated cost (config_weight). The largest run
    // first, and under MPI each goes to the rank with the least estimated
    // work so far (ties to the lower rank): a 256-GPU layer started last
    // would keep one thread busy while the others idle. Every rank works
    // the same assignment out; rows are written in configuration order.
    std::vector<double> weight(n, 0.0);
    std::vector<std::size_t> order;
    const std::vector<int> orders = symmetry_orders(spec);
    for (std::size_t i = start; i < n; ++i) weight[i] = config_weight(spec, spec.configs[i], orders), order.push_back(i);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return weight[a] > weight[b]; });
    std::vector<std::size_t> mine;
    std::vector<double> load(static_cast<std::size_t>(opt.mpi_size), 0.0);
    double total_weight = 0;
    for (std::size_t i : order) {
      const auto r = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
      load[r] += weight[i];
      total_weight += weight[i];
      if (r == static_cast<std::size_t>(opt.mpi_rank)) mine.push_back(i);
    }

    // The closed form's costs, once per topology variant this rank runs:
    // every configuration on it (and every thread) shares their resolved
    // collective forms.
    std::vector<std::unique_ptr<moe::AlphaBeta>> models(spec.topologies.size());
    std::vector<std::string> rows(n);
    std::vector<char> ready(n, 0);
    // This rank's own work. A failure is kept, not thrown, until every rank
    // knows whether any failed: a rank that threw alone would leave the others
    // waiting in the gather below for ever.
    std::exception_ptr failure;
    std::mutex mu;
    std::atomic<std::size_t> next{0};
    std::size_t done_count = 0;
    double done_weight = 0;
    Progress progress(n - start, total_weight, opt.progress && root);
    const bool stream = root && opt.mpi_size == 1;
    try {
      for (std::size_t i : mine) {
        auto& m = models[static_cast<std::size_t>(spec.configs[i].topology)];
        if (m) continue;
        m = std::make_unique<moe::AlphaBeta>(
            moe::alpha_beta_from_topology(*spec.topologies[spec.configs[i].topology].topo, nullptr, spec.symmetry));
        m->calibration = spec.calibration.get();
      }

      auto worker = [&] {
        Workspace ws;  // this thread's plans, routes, rate memos and pools
        while (true) {
          const std::size_t k = next.fetch_add(1);
          if (k >= mine.size()) return;
          const std::size_t i = mine[k];
          try {
            std::string r = run_config(spec, spec.configs[i],
                                       models[static_cast<std::size_t>(spec.configs[i].topology)].get(), &ws);
            std::lock_guard<std::mutex> lk(mu);
            rows[i] = std::move(r);
            ready[i] = 1;
            ++done_count;
            done_weight += weight[i] * static_cast<double>(opt.mpi_size);  // rank 0 reports; the others keep pace
            if (stream) {
              // Write the contiguous completed prefix, a whole configuration at a time.
              while (written < n && ready[written]) {
                write_all(pf.fd, rows[written], pf.path);
                std::string().swap(rows[written]);
                ++written;
              }
            }
            progress.update(done_count * static_cast<std::size_t>(opt.mpi_size), done_weight);
          } catch (...) {
            std::lock_guard<std::mutex> lk(mu);
            if (!failure) failure = std::current_exception();
            next = mine.size();
            return;
          }
        }
      };
      // No more threads than this rank has configurations. Should the system
      // refuse a thread, the ones started do the work (none started: the error).
      const int want = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(opt.threads), mine.size()));
      std::vector<std::thread> pool;
      try {
        for (int t = 0; t < want; ++t) pool.emplace_back(worker);
      } catch (const std::system_error& e) {
        if (pool.empty()) throw UserError(fmt::format("sweep: cannot start a thread: {}", e.what()));
      }
      for (auto& th : pool) th.join();
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
    if (opt.mpi_size > 1) {
      // Every rank learns whether any failed; rank 0 learns why, says it, and
      // every rank ends with a non-zero exit.
      if (mpi::allreduce_max(failure ? 1.0 : 0.0) > 0) {
        const std::vector<std::string> why = mpi::gather_strings(failure ? failure_text(failure) : std::string());
        if (root) {
          // The first failing rank's reason, printed here and now: mpirun ends
          // the job at the first non-zero exit, which could be another rank's
          // before this one's message is out. The barrier holds them until it is.
          std::string msg;  // kind ('U' or 'I'), then the message
          for (std::size_t r = 0; r < why.size() && msg.empty(); ++r)
            if (!why[r].empty())
              msg = why[r].substr(0, 1) +
                    (r == 0 ? std::string() : fmt::format("sweep: MPI rank {} of {}: ", r, why.size())) + why[r].substr(1);
          if (msg.empty()) msg = "Isweep: a rank reported a failure but none said which";
          print_failure(msg);
          mpi::barrier();
          if (written == 0) ::unlink(pf.path.c_str());
          throw ReportedElsewhere(msg.substr(1));
        }
        mpi::barrier();
        throw ReportedElsewhere("sweep: a rank failed");
      }
    } else if (failure) {
      std::rethrow_exception(failure);
    }

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
          if (!ready[i]) throw UserError(fmt::format("sweep: configuration {} came back from no MPI rank", i));
          write_all(pf.fd, rows[i], pf.path);
          ++written;
        }
      }
    }
    progress.update(n - start, total_weight, true);
    sum.configs_run = n - start;
    // Rows left out by skip_oom, counted from the memory model alone (cheap: no simulation),
    // so resumed and MPI-sharded runs count every configuration.
    for (const Config& c : spec.configs) sum.skipped_oom += spec.schedules.size() - rows_of(spec, c);
    sum.rows = n * spec.schedules.size() - sum.skipped_oom;
    if (root) {
      // The results and their run.json appear together: both are written to
      // temporaries, then renamed; the partial file goes last.
      sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      OutputBatch batch;
      write_atomically(opt.out, [&](std::ostream& os) { copy_results(pf.fd, pf.path, os); });
      write_run_json(spec, opt, sum, inputs);
      batch.commit();
      ::unlink(pf.path.c_str());
    }
  } catch (const UserError& e) {
    if (!root) throw;
    if (written == 0) {
      ::unlink(pf.path.c_str());
      throw;
    }
    throw UserError(fmt::format("{} ({} complete configuration(s) stay in '{}'; --resume continues from there)",
                                e.what(), written, pf.path));
  } catch (...) {
    if (root && written == 0) ::unlink(pf.path.c_str());
    throw;
  }
  return sum;
}

}  // namespace parmsim::sweep
