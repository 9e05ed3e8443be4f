#include "sim/graph/graph_io.hpp"

#include <fmt/format.h>

#include <cmath>
#include <map>

#include "sim/core/error.hpp"
#include "sim/graph/algorithms.hpp"
#include "sim/io/yaml_reader.hpp"

namespace parmsim {
namespace {

const Section kGraph{"graph",
                     "A task graph file (YAML or JSON).",
                     {{"ranks", "int", "required", "number of ranks (GPUs 0..ranks-1 of the topology)"},
                      {"streams", "list", "[main]", "stream names, the same on every rank"},
                      {"buffers", "list", "[]", "graph.buffers[]"},
                      {"collectives", "list", "[]", "graph.collectives[]"},
                      {"tasks", "list", "required", "graph.tasks[], each stream runs its tasks in list order"}}};
const Section kBuf{"graph.buffers[]",
                   "A buffer on one rank.",
                   {{"rank", "int", "required", ""},
                    {"name", "string", "required", "unique on its rank"},
                    {"elems", "int", "required", "element count"},
                    {"dtype", "string", "fp32", "fp32 | fp16 | bf16"}}};
const Section kColl{
    "graph.collectives[]",
    "A collective; every rank of `group` needs one task naming it.",
    {{"name", "string", "required", "unique"},
     {"op", "string", "required", "alltoall | alltoallv | allgather | reducescatter | allreduce | sendrecv | saa"},
     {"group", "list", "required", "ranks, in member order"},
     {"bytes", "size", "required*", "nccl-tests size (not for alltoallv)"},
     {"matrix", "list", "alltoallv", "per-member rows of sizes sent to each member"},
     {"algo", "string", "auto",
      algorithm_help()},
     {"proto", "string", "NCCL's choice", "NCCL algorithms: ll | ll128 | simple"},
     {"channels", "int", "NCCL's count", "NCCL algorithms: channels (rings or trees) to run"},
     {"window", "int", "0", "direct: peers in flight at once (0 = all)"},
     {"inner", "int", "saa", "saa: inner (AllGather) group size"}}};
const Section kTask{
    "graph.tasks[]",
    "A compute task (`op`) or one rank's part of a collective (`collective`).",
    {{"name", "string", "required", "unique"},
     {"rank", "int", "required", ""},
     {"stream", "string", "first stream", ""},
     {"op", "string", "compute", "gemm | softmax | topk | order | iorder | activation | elementwise | copy | slice"},
     {"flops", "count", "0", "floating point operations"},
     {"bytes", "size", "0B", "memory bytes read and written"},
     {"dtype", "string", "fp32", ""},
     {"shape", "list", "[]",
      "gemm only: [m, n, k] or [m, n, k, batch] (C[m,n] = A[m,k] B[k,n], batch problems in one call), each >= 1; "
      "flops default to 2*m*n*k*batch and must equal it if given; without a shape a gemm is costed as a cube"},
     {"collective", "string", "collective", "name of the collective this task is a part of"},
     {"inputs", "list", "[]", "buffer names on this rank"},
     {"outputs", "list", "[]", "buffer names on this rank"},
     {"deps", "list", "[]", "names of tasks this one waits for"}}};
SectionRegistrar r1(kGraph), r2(kBuf), r3(kColl), r4(kTask);

std::uint64_t as_count(const YamlReader& r) {
  const double v = r.as_double();
  if (v < 0 || v != std::floor(v) || v > 1.8e19) r.fail("a non-negative whole number (1e9 allowed)");
  return static_cast<std::uint64_t>(v);
}

DType dtype_of(const YamlReader& r) {
  try {
    return parse_dtype(r.as_string());
  } catch (const UserError&) {
    r.fail("fp32, fp16, bf16 or fp8");
  }
}

std::vector<std::string> strings(const YamlReader& r) {
  r.expect_seq();
  std::vector<std::string> v;
  for (std::size_t i = 0; i < r.size(); ++i) v.push_back(r[i].as_string());
  return v;
}

TaskGraph build(const YamlReader& top) {
  top.check_keys(kGraph);
  const int R = static_cast<int>(top.at("ranks").as_int(1, 1 << 20));
  TaskGraphBuilder b(R);
  std::vector<std::string> streams{"main"};
  if (auto s = top.opt("streams")) {
    streams = strings(*s);
    if (streams.empty()) s->fail("at least one stream name");
    // Every rank holds every stream: bounded, as the graph is held in memory.
    if (static_cast<std::int64_t>(streams.size()) * R > (std::int64_t{1} << 24))
      s->fail(fmt::format("at most 2^24 streams in all: ranks * streams = {} * {}", R, streams.size()));
  }
  for (const auto& s : streams) b.add_stream_all(s);
  if (auto bufs = top.opt("buffers")) {
    bufs->expect_seq();
    for (std::size_t i = 0; i < bufs->size(); ++i) {
      const YamlReader x = (*bufs)[i];
      x.check_keys(kBuf);
      Buffer buf;
      buf.rank = static_cast<int>(x.at("rank").as_int(0, R - 1));
      buf.name = x.at("name").as_string();
      buf.elems = as_count(x.at("elems"));
      // Its bytes (elems * 2 or 4) stay 64-bit.
      if (buf.elems > (std::uint64_t{1} << 60)) x.at("elems").fail("at most 2^60 elements");
      if (auto d = x.opt("dtype")) buf.dtype = dtype_of(*d);
      b.add_buffer(buf);
    }
  }
  std::map<std::string, int> colls;
  std::map<int, YamlReader> coll_at;
  if (auto cs = top.opt("collectives")) {
    cs->expect_seq();
    for (std::size_t i = 0; i < cs->size(); ++i) {
      const YamlReader x = (*cs)[i];
      x.check_keys(kColl);
      Collective c;
      c.name = x.at("name").as_string();
      if (!parse_coll_op(x.at("op").as_string(), &c.op))
        x.at("op").fail("alltoall, alltoallv, allgather, reducescatter, allreduce, sendrecv or saa");
      const YamlReader grp = x.at("group");
      grp.expect_seq();
      for (std::size_t j = 0; j < grp.size(); ++j) c.group.push_back(static_cast<int>(grp[j].as_int(0, R - 1)));
      if (c.op == CollOp::alltoallv) {
        if (auto by = x.opt("bytes")) by->fail("no `bytes` on an alltoallv (its `matrix` gives the sizes)");
        const YamlReader m = x.at("matrix");
        m.expect_seq();
        for (std::size_t j = 0; j < m.size(); ++j) {
          m[j].expect_seq();
          std::vector<std::uint64_t> row;
          for (std::size_t k = 0; k < m[j].size(); ++k) row.push_back(m[j][k].as_size());
          c.matrix.push_back(row);
        }
      } else {
        if (auto m = x.opt("matrix")) m->fail(fmt::format("no `matrix` (only alltoallv takes one, not {})", to_string(c.op)));
        c.bytes = x.at("bytes").as_size();
      }
      c.algo = x.get_string("algo", "");
      c.proto = x.get_string("proto", "");
      if (!c.proto.empty() && c.proto != "ll" && c.proto != "ll128" && c.proto != "simple")
        x.at("proto").fail("ll, ll128 or simple");
      if (x.has("channels")) c.channels = static_cast<int>(x.at("channels").as_int(1, 64));
      if (auto w = x.opt("window")) {
        c.window = static_cast<int>(w->as_int(0, 1 << 20));
        if (const std::string why = window_unused(c.op, c.algo); !why.empty()) w->fail("no `window`: " + why);
      }
      if (c.op == CollOp::saa)
        c.inner = static_cast<int>(x.at("inner").as_int(1, 1 << 20));
      else if (auto in = x.opt("inner"))
        in->fail(fmt::format("no `inner` (only saa takes an inner group size, not {})", to_string(c.op)));
      if (colls.count(c.name)) x.at("name").fail("a collective name not used before");
      const int id = b.add_collective(c);
      colls[c.name] = id;
      coll_at.emplace(id, x);
    }
  }
  const YamlReader tasks = top.at("tasks");
  tasks.expect_seq();
  std::map<std::string, int> names;
  std::vector<std::pair<int, YamlReader>> dep_lists;
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    const YamlReader x = tasks[i];
    x.check_keys(kTask);
    Task t;
    t.name = x.at("name").as_string();
    if (names.count(t.name)) x.at("name").fail("a task name not used before");
    t.rank = static_cast<int>(x.at("rank").as_int(0, R - 1));
    t.stream = 0;
    if (auto s = x.opt("stream")) {
      t.stream = b.stream(t.rank, s->as_string());
      if (t.stream < 0) s->fail("one of the names in `streams`");
    }
    if (x.has("collective") == x.has("op")) x.fail("a task with exactly one of `op` or `collective`");
    if (auto c = x.opt("collective")) {
      auto it = colls.find(c->as_string());
      if (it == colls.end()) c->fail("the name of a collective declared in `collectives`");
      t.set_collective(it->second);
      // A collective's part takes its sizes from the collective.
      for (const char* k : {"flops", "bytes", "dtype", "shape"})
        if (auto v = x.opt(k))
          v->fail(fmt::format("no `{}` on a collective's task (the collective '{}' gives its sizes)", k, c->as_string()));
    } else {
      ComputeTask& ct = t.compute();
      if (!parse_op_kind(x.at("op").as_string(), &ct.op))
        x.at("op").fail("gemm, softmax, topk, order, iorder, activation, elementwise, copy or slice");
      // Its kernel, for calibration tables: the name up to any '#' (g0#1 and g0#2 share table g0).
      ct.kernel = b.kernel_id(std::string_view(t.name).substr(0, t.name.find('#')));
      if (auto f = x.opt("flops")) ct.flops = as_count(*f);
      if (auto by = x.opt("bytes")) ct.bytes = by->as_size();
      if (auto d = x.opt("dtype")) ct.dtype = dtype_of(*d);
      if (auto sh = x.opt("shape")) {
        if (ct.op != OpKind::gemm) sh->fail("no `shape` (only gemm tasks take one)");
        sh->expect_seq();
        if (sh->size() != 3 && sh->size() != 4) sh->fail("[m, n, k] or [m, n, k, batch]");
        double f = 2;
        for (std::size_t j = 0; j < sh->size(); ++j) {
          ct.shape.push_back((*sh)[j].as_int(1, std::int64_t{1} << 40));
          f *= static_cast<double>(ct.shape.back());
        }
        if (f > 1.8e19) sh->fail("a shape of at most 1.8e19 FLOPs");
        const auto fl = static_cast<std::uint64_t>(f);
        if (!x.has("flops"))
          ct.flops = fl;
        else if (ct.flops != fl)
          x.at("flops").fail(fmt::format("2*m*n*k*batch = {} for this shape (or leave flops out)", fl));
      }
    }
    if (auto in = x.opt("inputs")) t.inputs = strings(*in);
    if (auto out = x.opt("outputs")) t.outputs = strings(*out);
    const int id = b.add_task(t);
    names[t.name] = id;
    if (auto d = x.opt("deps")) dep_lists.emplace_back(id, *d);
  }
  for (auto& [id, d] : dep_lists) {
    d.expect_seq();
    for (std::size_t j = 0; j < d.size(); ++j) {
      auto it = names.find(d[j].as_string());
      if (it == names.end()) d[j].fail("the name of a task in this graph (dangling dependency)");
      if (it->second == id)
        d[j].fail(fmt::format("the name of another task: task '{}' depends on itself", d[j].as_string()));
      b.add_dep(id, it->second);
    }
  }
  try {
    return std::move(b).build();
  } catch (const UserError& e) {
    throw UserError(fmt::format("{}: {}", top.file(), e.what()));
  }
}

}  // namespace

TaskGraph parse_task_graph_text(const std::string& text, const std::string& name) {
  return build(YamlReader::load_string(text, name));
}

TaskGraph load_task_graph(const std::string& file) {
  return build(YamlReader::load_file(file));
}

}  // namespace parmsim
