#include "backend/verify.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>

#include <fmt/format.h>

#include "backend/cpu/cpu_executor.hpp"
#include "backend/cpu/moe_kernels.hpp"
#include "backend/reference/moe_reference.hpp"
#include "sim/core/error.hpp"

namespace parmsim::exec {
namespace {

using I = std::int64_t;

// Uniform in [-scale, scale) from a 64-bit generator: the same numbers on every platform.
struct Rng {
  std::uint64_t s;
  double next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return static_cast<double>(s >> 11) * (1.0 / 9007199254740992.0);
  }
  std::vector<float> fill(std::size_t n, double scale) {
    std::vector<float> v(n);
    for (auto& x : v) x = static_cast<float>((2 * next() - 1) * scale);
    return v;
  }
};

struct Data {
  std::vector<float> x, dout, Wg, W1, W2;  // global tensors
};

void round_all(DType t, std::vector<float>& v) {
  if (t != DType::fp32)
    for (float& x : v) x = round_to(t, x);
}

Data make_data(const moe::LayerSpec& s, const moe::Dims& d, std::uint64_t seed) {
  Rng r{seed * 0x9E3779B97F4A7C15ULL + 1};
  Data D;
  const std::size_t tokens = static_cast<std::size_t>(d.n_ep * d.S);
  D.x = r.fill(tokens * s.M, 1.0);
  D.Wg = r.fill(static_cast<std::size_t>(s.M * s.E), 1.0 / std::sqrt(static_cast<double>(s.M)));
  D.W1 = r.fill(static_cast<std::size_t>(s.E * s.M * s.H), 1.0 / std::sqrt(static_cast<double>(s.M)));
  D.W2 = r.fill(static_cast<std::size_t>(s.E * s.H * s.M), 1.0 / std::sqrt(static_cast<double>(s.H)));
  D.dout = r.fill(tokens * s.M, 1.0);
  for (auto* v : {&D.x, &D.Wg, &D.W1, &D.W2, &D.dout}) round_all(s.dtype, *v);
  return D;
}

// Rank r: MP group r / G (its tokens), MP index r % G (its shard of each expert),
// EP position r / G (which experts it holds).
void load(Memory& mem, const moe::LayerSpec& s, const moe::Dims& d, const Data& D) {
  const I G = d.G, M = s.M, H = s.H, h = H / G, El = d.E_local;
  for (int r = 0; r < d.P; ++r) {
    const I grp = r / G, m = r % G, q = r / G;
    auto& x = mem.at(r, "x");
    std::copy_n(D.x.begin() + grp * d.S * M, d.S * M, x.begin());
    if (mem.has(r, "dout")) std::copy_n(D.dout.begin() + grp * d.S * M, d.S * M, mem.at(r, "dout").begin());
    mem.at(r, "Wg") = D.Wg;
    auto& w1 = mem.at(r, "W1");
    auto& w2 = mem.at(r, "W2");
    for (I el = 0; el < El; ++el) {
      const I e = q * El + el;
      for (I i = 0; i < M; ++i)
        for (I j = 0; j < h; ++j) w1[(el * M + i) * h + j] = D.W1[(e * M + i) * H + m * h + j];
      for (I j = 0; j < h; ++j)
        for (I i = 0; i < M; ++i) w2[(el * h + j) * M + i] = D.W2[(e * H + m * h + j) * M + i];
    }
  }
}

moe::Dims dims_for(const moe::LayerSpec& s, const Cluster& c) {
  moe::Dims d = moe::make_dims(s, c.gpus, c.gpus_per_node);
  // The reference layer and the data layout cover one expert-parallel block.
  if (d.dp > 1)
    throw UserError(fmt::format("key 'ep': verify and execute run one expert-parallel block (ep = GPUs/mp = {}); "
                                "ep={} gives {} replicas: run them on {} GPUs",
                                c.gpus / s.mp, s.ep, d.dp, s.mp * s.ep));
  return d;
}

}  // namespace

void check_executable(const moe::LayerSpec& s) {
  // fp8 layers are timed only: the executors' kernels compute in fp32, fp16 and bf16.
  if (s.dtype == DType::fp8)
    throw UserError("--set dtype=fp8: the executors (verify, execute) run fp32, fp16 and bf16 layers; fp8 layers are "
                    "timed by the simulator: parmsim layer");
  // The executors' kernels (backend/cpu, backend/device) run ungated experts
  // and no shared experts; those are timed by the simulator alone.
  if (s.glu || s.shared_H > 0)
    throw UserError(fmt::format("--set {}: the executors (verify, execute) run ungated routed experts only "
                                "(fc1 -> activation -> fc2); gated and shared experts are timed by the simulator: "
                                "parmsim layer",
                                s.glu && s.shared_H > 0 ? "glu, shared_H" : s.glu ? "glu" : "shared_H"));
  if (s.ds_moe == moe::DsMoe::mcore)
    throw UserError("--set ds_moe=mcore: the executors (verify, execute) run DeepSpeed-MoE's baselines; Megatron-Core's "
                    "MoELayer is timed by the simulator: parmsim layer");
  if (s.token_dispatcher == moe::TokenDispatcher::allgather)
    throw UserError("--set token_dispatcher: the executors (verify, execute) run the AlltoAll dispatcher; the "
                    "AllGather dispatcher is timed by the simulator: parmsim layer");
}

float round_to(DType d, float v) {
  if (d == DType::bf16) {
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(v);
    if ((bits & 0x7F800000u) == 0x7F800000u) return v;  // inf, NaN
    const std::uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;
    return std::bit_cast<float>(rounded);
  }
  if (d == DType::fp16) return static_cast<float>(static_cast<_Float16>(v));
  return v;
}

moe::LayerSpec small_layer() {
  moe::LayerSpec s;
  s.B = 2, s.L = 8, s.M = 16, s.H = 32, s.E = 8, s.k = 2, s.f = 2.0, s.mp = 2;
  return s;
}

MemoryEstimate estimate_memory(const moe::LayerSpec& s, const Cluster& c, const moe::ScheduleOptions& o,
                               bool verify) {
  check_executable(s);
  const moe::Dims d = dims_for(s, c);
  const auto f = moe::forward_ops(s, d, o);
  const auto b = moe::backward_ops(f, s, d, o);
  const TaskGraph g = moe::build_training_graph(f, b, s, d, o);
  constexpr double F = sizeof(float);
  MemoryEstimate m;
  for (const Buffer& buf : g.buffers()) m.buffers += static_cast<double>(buf.elems) * F;
  // make_data: x and dout (tokens x M), Wg (M x E), W1 and W2 (E x M x H).
  const double tokens = static_cast<double>(d.n_ep) * static_cast<double>(d.S), M = static_cast<double>(s.M),
               H = static_cast<double>(s.H), E = static_cast<double>(s.E);
  m.data = (2 * tokens * M + M * E + 2 * E * M * H) * F;
  // The host communicator copies every member's input and output of a collective.
  const double per_byte = F / static_cast<double>(dtype_bytes(s.dtype));
  for (const Collective& col : g.collectives()) {
    double bytes = static_cast<double>(col.bytes);
    for (const auto& row : col.matrix)
      for (const std::uint64_t x : row) bytes = std::max(bytes, static_cast<double>(x) * static_cast<double>(row.size()));
    m.scratch = std::max(m.scratch, 2 * static_cast<double>(col.group.size()) * bytes * per_byte);
  }
  // The reference: the same gradients as the inputs and weights, and k activations of H per token.
  if (verify) m.reference = m.data + 2 * tokens * static_cast<double>(s.k) * H * F;
  return m;
}

double VerifyResult::worst() const {
  double w = 0;
  for (const auto& e : errors) w = std::max(w, e.max_rel_error);
  return w;
}

Execution execute_schedule(const moe::LayerSpec& s, const Cluster& c, const moe::ScheduleOptions& o, std::uint64_t seed,
                           Executor* executor) {
  check_executable(s);
  const moe::Dims d = dims_for(s, c);
  const auto f = moe::forward_ops(s, d, o);
  const auto b = moe::backward_ops(f, s, d, o);
  Execution ex{moe::build_training_graph(f, b, s, d, o), {}};
  Memory mem(ex.graph);
  load(mem, s, d, make_data(s, d, seed));
  CpuExecutor cpu(moe_kernels());
  ex.trace = (executor ? *executor : static_cast<Executor&>(cpu)).run(ex.graph, mem);
  return ex;
}

VerifyResult verify_schedule(const moe::LayerSpec& s, const Cluster& c, const moe::ScheduleOptions& o,
                             std::uint64_t seed, const KernelTable* kernels, Executor* executor) {
  check_executable(s);
  const moe::Dims d = dims_for(s, c);
  const auto f = moe::forward_ops(s, d, o);
  const auto b = moe::backward_ops(f, s, d, o);
  const TaskGraph g = moe::build_training_graph(f, b, s, d, o);
  Memory mem(g);
  const Data D = make_data(s, d, seed);
  load(mem, s, d, D);
  CpuExecutor cpu(kernels ? *kernels : moe_kernels());
  Executor& ex = executor ? *executor : static_cast<Executor&>(cpu);
  ex.run(g, mem);

  // The schedule's capacity rule, reproduced by the reference.
  ref::MoeRefSpec rs{d.n_ep, d.S, s.M, s.H, s.E, s.k, d.S, d.T_base};
  if (o.parm && o.split == moe::Split::before_gate) rs.block = d.S / d.G, rs.capacity = d.T_parm;
  const ref::MoeRefResult R = ref::moe_reference(rs, D.x, D.dout, D.Wg, D.W1, D.W2);

  VerifyResult v;
  v.schedule = o.name;
  v.dropped = R.dropped;
  const I G = d.G, M = s.M, H = s.H, h = H / G, El = d.E_local, E = s.E;
  auto compare = [&](const std::string& name, auto want_at, const std::string& buf, I n) {
    double maxw = 0, maxd = 0;
    for (int r = 0; r < d.P; ++r) {
      if (!ex.owns(r)) continue;
      const auto& got = mem.at(r, buf);
      for (I i = 0; i < n; ++i) {
        const double w = want_at(r, i);
        maxw = std::max(maxw, std::abs(w));
        maxd = std::max(maxd, std::abs(static_cast<double>(got[i]) - w));
      }
    }
    v.errors.push_back({name, maxw > 0 ? maxd / maxw : maxd});
  };
  compare(
      "output", [&](int r, I i) { return R.out[(r / G) * d.S * M + i]; }, "out", d.S * M);
  compare(
      "input_grad", [&](int r, I i) { return R.dx[(r / G) * d.S * M + i]; }, "dx", d.S * M);
  compare(
      "gate_weight_grad", [&](int r, I i) { return R.dWg[(r / G) * M * E + i]; }, "dWg", M * E);
  compare(
      "fc1_weight_grad",
      [&](int r, I i) {
        const I el = i / (M * h), rem = i % (M * h), row = rem / h, j = rem % h;
        const I e = (r / G) * El + el;
        return R.dW1[(e * M + row) * H + (r % G) * h + j];
      },
      "dW1", El * M * h);
  compare(
      "fc2_weight_grad",
      [&](int r, I i) {
        const I el = i / (h * M), rem = i % (h * M), j = rem / M, col = rem % M;
        const I e = (r / G) * El + el;
        return R.dW2[(e * H + (r % G) * h + j) * M + col];
      },
      "dW2", El * h * M);
  return v;
}

}  // namespace parmsim::exec
