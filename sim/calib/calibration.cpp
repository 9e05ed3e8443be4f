#include "sim/calib/calibration.hpp"

#include <fmt/format.h>

#include "sim/core/error.hpp"
#include "sim/io/yaml_reader.hpp"

namespace parmsim {
namespace {

const Section kCal{"calibration",
                   "A calibration file (parmsim calibrate -o FILE; read with --calibration FILE).",
                   {{"collectives", "list", "[]", "calibration.collectives[]"}}};
const Section kColl{"calibration.collectives[]",
                    "One measured collective: time(size) = alpha + size / bandwidth.",
                    {{"op", "string", "required", "allreduce | allgather | reducescatter | alltoall | sendrecv"},
                     {"ranks", "int", "required", "group size"},
                     {"hosts", "int", "1", "nodes the measurement spanned"},
                     {"link", "string", "required", "intra (one node) | inter"},
                     {"alpha", "time", "required", "fixed cost"},
                     {"bandwidth", "bandwidth", "required", "nccl-tests size per second"},
                     {"points", "int", "-", "measurements fitted"},
                     {"held_out_mape", "number", "-", "error on held-out sizes"},
                     {"held_out_mape_1MiB", "number", "-", "the same, sizes >= 1 MiB"},
                     {"held_out_worst_1MiB", "number", "-", "worst held-out error, sizes >= 1 MiB"},
                     {"source", "string", "-", "where the measurements came from"}}};
SectionRegistrar r1(kCal), r2(kColl);

}  // namespace

const CalibratedCollective* Calibration::find(CollOp op, int ranks, bool inter) const {
  for (const auto& c : collectives)
    if (c.op == op && c.ranks == ranks && c.inter == inter) return &c;
  return nullptr;
}

Calibration load_calibration(const std::string& file) {
  const YamlReader r = YamlReader::load_file(file);
  r.check_keys(kCal);
  Calibration cal;
  cal.file = file;
  if (auto cs = r.opt("collectives")) {
    cs->expect_seq();
    for (std::size_t i = 0; i < cs->size(); ++i) {
      const YamlReader e = (*cs)[i];
      e.check_keys(kColl);
      CalibratedCollective c;
      if (!parse_coll_op(e.at("op").as_string(), &c.op) || c.op == CollOp::saa || c.op == CollOp::alltoallv)
        e.at("op").fail("allreduce, allgather, reducescatter, alltoall or sendrecv");
      c.ranks = static_cast<int>(e.at("ranks").as_int(2, 1 << 20));
      const std::string link = e.at("link").as_string();
      if (link != "intra" && link != "inter") e.at("link").fail("intra or inter");
      c.inter = link == "inter";
      c.alpha = e.at("alpha").as_time();
      c.bandwidth = e.at("bandwidth").as_bandwidth();
      c.source = e.get_string("source", "");
      if (cal.find(c.op, c.ranks, c.inter))
        e.fail(fmt::format("one entry per (op, ranks, link); {} over {} ranks ({}) appears twice", to_string(c.op),
                           c.ranks, link));
      cal.collectives.push_back(c);
    }
  }
  return cal;
}

}  // namespace parmsim
