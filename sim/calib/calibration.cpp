#include "sim/calib/calibration.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "sim/calib/fit.hpp"
#include "sim/core/error.hpp"
#include "sim/io/yaml_reader.hpp"

namespace parmsim {
namespace {

const Section kCal{"calibration",
                   "A calibration file (parmsim calibrate -o FILE; read with --calibration FILE).",
                   {{"source", "string", "-", "what was measured"},
                    {"collectives", "list", "[]", "calibration.collectives[]"},
                    {"kernels", "list", "[]", "calibration.kernels[]"}}};
const Section kKern{"calibration.kernels[]",
                    "Measured times of one kernel kind: x is FLOPs for gemm, bytes moved otherwise.",
                    {{"name", "string", "required", "task kind: the task name before '#', e.g. expert_fc1"},
                     {"op", "string", "required", "gemm (x = FLOPs) or a memory-bound kind (x = bytes)"},
                     {"dtype", "string", "fp32", ""},
                     {"points_us", "list", "required", "[[x, microseconds], ...], two or more distinct x"},
                     {"held_out_mape", "number", "-", "error of the alpha-beta line on held-out points"},
                     {"source", "string", "-", ""}}};
const Section kColl{"calibration.collectives[]",
                    "One measured collective: the measured points interpolated in log(size)-log(time) within their "
                    "range, time(size) = alpha + size / bandwidth beyond it (or without points).",
                    {{"op", "string", "required", "allreduce | allgather | reducescatter | alltoall | sendrecv"},
                     {"ranks", "int", "required", "group size"},
                     {"hosts", "int", "1", "nodes the measurement spanned"},
                     {"link", "string", "required", "intra (one node) | inter"},
                     {"alpha", "time", "required", "fixed cost"},
                     {"bandwidth", "bandwidth", "required", "nccl-tests size per second"},
                     {"points", "int", "-", "measurements fitted"},
                     {"points_us", "list", "-",
                      "[[bytes, microseconds], ...] measured, two or more distinct sizes: interpolated within their "
                      "range"},
                     {"held_out_mape", "number", "-", "error on held-out sizes"},
                     {"held_out_curve_mape", "number", "-", "the measured curve's error on held-out sizes"},
                     {"held_out_mape_1MiB", "number", "-", "the same, sizes >= 1 MiB"},
                     {"held_out_worst_1MiB", "number", "-", "worst held-out error, sizes >= 1 MiB"},
                     {"topology", "string", "-", "the cluster measured"},
                     {"source", "string", "-", "where the measurements came from"}}};
SectionRegistrar r1(kCal), r2(kColl), r3(kKern);

}  // namespace

namespace {
// A time past 2^63 ps from a calibration entry: the entry is the cause, not the graph or the topology.
[[noreturn]] void entry_overflow(const std::string& where, const std::string& what, const std::string& how,
                                 const TimeOverflow& e) {
  const std::string entry = where.empty() ? std::string("a calibration entry") : "calibration " + where;
  throw TimeOverflow(fmt::format("{}: {} takes past 2^63 ps (about 106 days) by this entry's {} ({}); check the "
                                 "entry's values and units",
                                 entry, what, how, e.what()),
                     entry);
}
}  // namespace

Time KernelTable::time(double x) const {
  if (const auto t = calib::interpolate_log_log(points, x)) return duration_for_rate(*t, 1.0);
  try {
    return duration_for_rate(std::max(0.0, alpha + beta * x), 1.0);
  } catch (const TimeOverflow& e) {
    entry_overflow(where, fmt::format("x = {:.6g}", x), "alpha-beta line beyond its points", e);
  }
}

Time CalibratedCollective::time(std::uint64_t bytes) const {
  if (points.size() >= 2)
    if (const auto t = calib::interpolate_log_log(points, static_cast<double>(bytes))) return duration_for_rate(*t, 1.0);
  try {
    return alpha + duration_for(bytes, bandwidth);
  } catch (const TimeOverflow& e) {
    entry_overflow(where, fmt::format("{} B", bytes),
                   fmt::format("alpha {:.6g} us + size / bandwidth {} B/s", alpha.to_us(), bandwidth), e);
  }
}

const KernelTable* Calibration::kernel(std::string_view name, DType dtype) const {
  for (const auto& k : kernels)
    if (k.name == name && k.dtype == dtype) return &k;
  return nullptr;
}

const CalibratedCollective* Calibration::find(CollOp op, int ranks, bool inter) const {
  for (const auto& c : collectives)
    if (c.op == op && c.ranks == ranks && c.inter == inter) return &c;
  return nullptr;
}

namespace {

// points_us: [[x, microseconds], ...]. Each time a measurement (finite, above 0, at most
// calib::kMaxMeasuredUs), each x once: a repeated size is refused, naming both, never averaged.
// Returns (x, seconds) in file order.
std::vector<std::pair<double, double>> read_points(const YamlReader& pts, const char* pair, const char* x_name) {
  pts.expect_seq();
  std::vector<std::pair<double, double>> out;
  std::map<double, std::size_t> first;  // x -> its index
  for (std::size_t j = 0; j < pts.size(); ++j) {
    const YamlReader pt = pts[j];
    pt.expect_seq();
    if (pt.size() != 2) pt.fail(pair);
    const double x = pt[0].as_double(), us = pt[1].as_double();
    if (!(x > 0) || !(us > 0) || !std::isfinite(x) || !std::isfinite(us)) pt.fail("a positive size and a positive time");
    if (const std::string why = calib::measured_time_error(us); !why.empty())
      pt[1].fail(fmt::format("a measured time in microseconds, got {}: {}", us, why));
    if (const auto [it, fresh] = first.emplace(x, j); !fresh)
      pt.fail(fmt::format("each {} once, got: {} {} appears twice (first at points_us[{}]); repeated sizes are not "
                          "averaged",
                          x_name, x_name, x, it->second));
    out.emplace_back(x, us * 1e-6);
  }
  return out;
}

Calibration read_calibration(const YamlReader& r, const std::string& file) {
  r.check_keys(kCal);
  Calibration cal;
  cal.file = file;
  std::vector<int> coll_lines, kern_lines;  // each entry's line, for "first at line N"
  auto line_of = [](const YamlReader& e) { return e.node().Mark().line + 1; };
  if (r.has("source")) r.at("source").as_string();
  if (auto cs = r.opt("collectives")) {
    cs->expect_seq();
    for (std::size_t i = 0; i < cs->size(); ++i) {
      const YamlReader e = (*cs)[i];
      e.check_keys(kColl);
      CalibratedCollective c;
      if (!parse_coll_op(e.at("op").as_string(), &c.op) || c.op == CollOp::alltoallv)
        e.at("op").fail("allreduce, allgather, reducescatter, alltoall, sendrecv or saa");
      c.ranks = static_cast<int>(e.at("ranks").as_int(2, 1 << 20));
      const std::string link = e.at("link").as_string();
      if (link != "intra" && link != "inter") e.at("link").fail("intra or inter");
      c.inter = link == "inter";
      c.alpha = e.at("alpha").as_time();
      if (c.alpha.to_us() > calib::kMaxMeasuredUs)
        e.at("alpha").fail(fmt::format("a fixed cost of at most {:.1e} us (an hour), got {:.6g} us", calib::kMaxMeasuredUs,
                                       c.alpha.to_us()));
      c.bandwidth = e.at("bandwidth").as_bandwidth();
      c.source = e.get_string("source", "");
      if (e.has("topology")) e.at("topology").as_string();
      if (e.has("hosts")) e.at("hosts").as_int(1, 1 << 20);
      if (e.has("points")) e.at("points").as_int(0, 1 << 30);
      for (const char* k : {"held_out_mape", "held_out_curve_mape", "held_out_mape_1MiB", "held_out_worst_1MiB"})
        if (e.has(k) && !(e.at(k).as_double() >= 0)) e.at(k).fail("a non-negative fraction");
      if (auto pts = e.opt("points_us")) {
        c.points = read_points(*pts, "a pair [bytes, microseconds]", "size");
        std::sort(c.points.begin(), c.points.end());
        if (c.points.size() < 2) pts->fail("two or more measured sizes");
      }
      if (const CalibratedCollective* first = cal.find(c.op, c.ranks, c.inter))
        e.fail(fmt::format("one entry per (op, ranks, link); {} over {} ranks ({}) appears twice (first at line {}), "
                           "got a second",
                           to_string(c.op), c.ranks, link, coll_lines[static_cast<std::size_t>(first - cal.collectives.data())]));
      c.where = fmt::format("{}:{} (collectives[{}]: {} over {} ranks, {})", file, line_of(e), i, to_string(c.op),
                            c.ranks, link);
      cal.collectives.push_back(c);
      coll_lines.push_back(line_of(e));
    }
  }
  if (auto ks = r.opt("kernels")) {
    ks->expect_seq();
    for (std::size_t i = 0; i < ks->size(); ++i) {
      const YamlReader e = (*ks)[i];
      e.check_keys(kKern);
      KernelTable k;
      k.name = e.at("name").as_string();
      if (!parse_op_kind(e.at("op").as_string(), &k.op)) e.at("op").fail("a compute op kind such as gemm or order");
      if (e.has("dtype")) {
        try {
          k.dtype = parse_dtype(e.at("dtype").as_string());
        } catch (const UserError&) {
          e.at("dtype").fail("fp32, fp16, bf16 or fp8");
        }
      }
      const YamlReader pts = e.at("points_us");
      k.points = read_points(pts, "a pair [x, microseconds]", "x");
      std::vector<calib::Point> fit;
      for (const auto& [x, t] : k.points) fit.push_back({x, t});
      std::sort(k.points.begin(), k.points.end());
      try {
        const calib::AlphaBeta ab = calib::fit_alpha_beta(fit);
        k.alpha = ab.alpha, k.beta = ab.beta;
      } catch (const UserError& err) {
        pts.fail(err.what());
      }
      if (const KernelTable* first = cal.kernel(k.name, k.dtype))
        e.fail(fmt::format("one table per (name, dtype); {} ({}) appears twice (first at line {}), got a second",
                           k.name, to_string(k.dtype), kern_lines[static_cast<std::size_t>(first - cal.kernels.data())]));
      if (e.has("source")) e.at("source").as_string();
      if (e.has("held_out_mape") && !(e.at("held_out_mape").as_double() >= 0))
        e.at("held_out_mape").fail("a non-negative fraction");
      k.where = fmt::format("{}:{} (kernels[{}]: {}, {})", file, line_of(e), i, k.name, to_string(k.dtype));
      cal.kernels.push_back(std::move(k));
      kern_lines.push_back(line_of(e));
    }
  }
  return cal;
}

}  // namespace

Calibration load_calibration(const std::string& file) { return read_calibration(YamlReader::load_file(file), file); }

Calibration parse_calibration_text(const std::string& text, const std::string& name) {
  return read_calibration(YamlReader::load_string(text, name), name);
}

}  // namespace parmsim
