#include "backend/cpu/moe_kernels.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "sim/core/error.hpp"

namespace parmsim::exec {
namespace {

using I = std::int64_t;

std::vector<float>& in(const Task& t, Memory& m, std::size_t i) {
  return m.at(t.rank, t.inputs.at(i));
}
std::vector<float>& out(const Task& t, Memory& m, std::size_t i) {
  return m.at(t.rank, t.outputs.at(i));
}

void need(const Task& t, const std::vector<float>& b, std::size_t elems, const std::string& name) {
  if (b.size() < elems)
    throw UserError(
        fmt::format("task '{}': buffer '{}' has {} elements, the kernel needs {}", t.name, name, b.size(), elems));
}

// Where slot `slot` of expert `e` for token `t` lives in a combine-side
// buffer (SlotLayout; for `sliced`, C is Tl).
std::size_t slot_at(SlotLayout layout, I t, I e, I slot, I E, I C, I M, I per) {
  if (layout == SlotLayout::local) return static_cast<std::size_t>((e * C + slot) * M);
  if (layout == SlotLayout::gathered) return static_cast<std::size_t>((((t / per) * E + e) * C + slot) * M);
  return static_cast<std::size_t>((((slot / C) * E + e) * C + slot % C) * M);
}

// Calls fn(i, j, e, slot, weight) for every kept choice (slot >= 0) of
// tokens 0..count-1, in token order: the route layout in one place.
template <class Fn>
void for_each_kept(const std::vector<float>& route, I count, I k, Fn fn) {
  for (I i = 0; i < count; ++i)
    for (I j = 0; j < k; ++j) {
      const float* r = &route[(i * k + j) * 3];
      const I slot = static_cast<I>(r[1]);
      if (slot >= 0) fn(i, j, static_cast<I>(r[0]), slot, r[2]);
    }
}

void gate(const Task& t, const MoeGateArgs& a, Memory& m) {
  const I begin = a.begin, count = a.count, M = a.M, E = a.E, k = a.k, C = a.C;
  auto& x = in(t, m, 0);
  auto& wg = in(t, m, 1);
  auto& probs = out(t, m, 0);
  auto& route = out(t, m, 1);
  need(t, x, (begin + count) * M, t.inputs[0]);
  need(t, wg, M * E, t.inputs[1]);
  need(t, probs, count * E, t.outputs[0]);
  need(t, route, count * k * 3, t.outputs[1]);
  std::vector<I> top(count * k);
  for (I i = 0; i < count; ++i) {
    const float* xr = &x[(begin + i) * M];
    float* p = &probs[i * E];
    for (I e = 0; e < E; ++e) {
      float s = 0;
      for (I c = 0; c < M; ++c) s += xr[c] * wg[c * E + e];
      p[e] = s;
    }
    const float mx = *std::max_element(p, p + E);
    float z = 0;
    for (I e = 0; e < E; ++e) z += (p[e] = std::exp(p[e] - mx));
    for (I e = 0; e < E; ++e) p[e] /= z;
    std::vector<I> idx(E);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [p](I u, I v) { return p[u] > p[v]; });
    for (I j = 0; j < k; ++j) top[i * k + j] = idx[j];
  }
  std::vector<I> fill(E, 0);
  for (I j = 0; j < k; ++j)
    for (I i = 0; i < count; ++i) {
      const I e = top[i * k + j];
      const I slot = fill[e] < C ? fill[e]++ : -1;
      float* r = &route[(i * k + j) * 3];
      r[0] = static_cast<float>(e);
      r[1] = static_cast<float>(slot);
      r[2] = probs[i * E + e];
    }
}

void order(const Task& t, const MoeOrderArgs& a, Memory& m) {
  const I begin = a.begin, count = a.count, M = a.M, E = a.E, k = a.k, C = a.C;
  auto& x = in(t, m, 0);
  auto& route = in(t, m, 1);
  auto& disp = out(t, m, 0);
  need(t, x, (begin + count) * M, t.inputs[0]);
  need(t, route, count * k * 3, t.inputs[1]);
  need(t, disp, E * C * M, t.outputs[0]);
  std::fill(disp.begin(), disp.end(), 0.0f);
  for_each_kept(route, count, k,
                [&](I i, I, I e, I slot, float) { std::copy_n(&x[(begin + i) * M], M, &disp[(e * C + slot) * M]); });
}

void order_bwd(const Task& t, const MoeOrderBwdArgs& a, Memory& m) {
  const I count = a.count, M = a.M, E = a.E, k = a.k, C = a.C, Tl = a.Tl;
  const bool sliced = a.layout == SlotLayout::sliced;
  auto& dd = in(t, m, 0);
  auto& route = in(t, m, 1);
  auto& dx = out(t, m, 0);
  need(t, route, count * k * 3, t.inputs[1]);
  need(t, dx, count * M, t.outputs[0]);
  std::fill(dx.begin(), dx.begin() + count * M, 0.0f);
  for_each_kept(route, count, k, [&](I i, I, I e, I slot, float) {
    const std::size_t at = sliced ? slot_at(SlotLayout::sliced, i, e, slot, E, Tl, M, 1)
                                  : slot_at(SlotLayout::local, i, e, slot, E, C, M, 1);
    need(t, dd, at + M, t.inputs[0]);
    for (I c = 0; c < M; ++c) dx[i * M + c] += dd[at + c];
  });
}

void slot_slice(const Task& t, const MoeSlotSliceArgs& a, Memory& m) {
  const I E = a.E, C = a.C, Tl = a.Tl, M = a.M, mb = a.member;
  auto& src = in(t, m, 0);
  auto& dst = out(t, m, 0);
  need(t, src, E * C * M, t.inputs[0]);
  need(t, dst, E * Tl * M, t.outputs[0]);
  std::fill(dst.begin(), dst.end(), 0.0f);
  for (I e = 0; e < E; ++e)
    for (I s = 0; s < Tl; ++s) {
      const I from = mb * Tl + s;
      if (from < C) std::copy_n(&src[(e * C + from) * M], M, &dst[(e * Tl + s) * M]);
    }
}

// Rows of expert e: in[x][e][c] for all x, c.
void experts(const Task& t, const MoeExpertsArgs& a, Memory& m) {
  const I X = a.X, El = a.E_local, C = a.C, M = a.M, h = a.h;
  auto& x = in(t, m, 0);
  auto& w1 = in(t, m, 1);
  auto& w2 = in(t, m, 2);
  auto& y = out(t, m, 0);
  auto& h1 = out(t, m, 1);
  need(t, x, X * El * C * M, t.inputs[0]);
  need(t, w1, El * M * h, t.inputs[1]);
  need(t, w2, El * h * M, t.inputs[2]);
  need(t, y, X * El * C * M, t.outputs[0]);
  need(t, h1, X * El * C * h, t.outputs[1]);
  std::vector<float> act(h);
  for (I xi = 0; xi < X; ++xi)
    for (I e = 0; e < El; ++e)
      for (I c = 0; c < C; ++c) {
        const I row = (xi * El + e) * C + c;
        const float* xr = &x[row * M];
        float* hr = &h1[row * h];
        for (I j = 0; j < h; ++j) hr[j] = 0;
        for (I i = 0; i < M; ++i) {
          const float xv = xr[i];
          const float* w = &w1[(e * M + i) * h];
          for (I j = 0; j < h; ++j) hr[j] += xv * w[j];
        }
        for (I j = 0; j < h; ++j) act[j] = hr[j] > 0 ? hr[j] : 0.0f;
        float* yr = &y[row * M];
        for (I i = 0; i < M; ++i) yr[i] = 0;
        for (I j = 0; j < h; ++j) {
          const float av = act[j];
          const float* w = &w2[(e * h + j) * M];
          for (I i = 0; i < M; ++i) yr[i] += av * w[i];
        }
      }
}

void experts_bwd(const Task& t, const MoeExpertsBwdArgs& a, Memory& m) {
  const I X = a.X, El = a.E_local, C = a.C, M = a.M, h = a.h;
  auto& dy = in(t, m, 0);
  auto& x = in(t, m, 1);
  auto& h1 = in(t, m, 2);
  auto& w1 = in(t, m, 3);
  auto& w2 = in(t, m, 4);
  auto& dx = out(t, m, 0);
  auto& dw1 = out(t, m, 1);
  auto& dw2 = out(t, m, 2);
  const I n = X * El * C;
  need(t, dy, n * M, t.inputs[0]);
  need(t, x, n * M, t.inputs[1]);
  need(t, h1, n * h, t.inputs[2]);
  need(t, w1, El * M * h, t.inputs[3]);
  need(t, w2, El * h * M, t.inputs[4]);
  need(t, dx, n * M, t.outputs[0]);
  need(t, dw1, El * M * h, t.outputs[1]);
  need(t, dw2, El * h * M, t.outputs[2]);
  std::fill(dw1.begin(), dw1.end(), 0.0f);
  std::fill(dw2.begin(), dw2.end(), 0.0f);
  std::vector<float> dh(h);
  for (I xi = 0; xi < X; ++xi)
    for (I e = 0; e < El; ++e)
      for (I c = 0; c < C; ++c) {
        const I row = (xi * El + e) * C + c;
        const float* dyr = &dy[row * M];
        const float* hr = &h1[row * h];
        const float* xr = &x[row * M];
        for (I j = 0; j < h; ++j) {
          const float av = hr[j] > 0 ? hr[j] : 0.0f;
          const float* w = &w2[(e * h + j) * M];
          float* dw = &dw2[(e * h + j) * M];
          float s = 0;
          for (I i = 0; i < M; ++i) {
            s += dyr[i] * w[i];
            dw[i] += av * dyr[i];
          }
          dh[j] = hr[j] > 0 ? s : 0.0f;
        }
        float* dxr = &dx[row * M];
        for (I i = 0; i < M; ++i) {
          const float xv = xr[i];
          const float* w = &w1[(e * M + i) * h];
          float* dw = &dw1[(e * M + i) * h];
          float s = 0;
          for (I j = 0; j < h; ++j) {
            s += dh[j] * w[j];
            dw[j] += xv * dh[j];
          }
          dxr[i] = s;
        }
      }
}

void iorder(const Task& t, const MoeIOrderArgs& a, Memory& m) {
  const I count = a.count, M = a.M, E = a.E, k = a.k, C = a.C, per = std::max<I>(1, a.per);
  const SlotLayout layout = a.layout;
  auto& comb = in(t, m, 0);
  auto& route = in(t, m, 1);
  auto& o = out(t, m, 0);
  need(t, o, count * M, t.outputs[0]);
  need(t, route, count * k * 3, t.inputs[1]);
  std::fill(o.begin(), o.begin() + count * M, 0.0f);
  for_each_kept(route, count, k, [&](I i, I, I e, I slot, float w) {
    const std::size_t at = slot_at(layout, i, e, slot, E, C, M, per);
    need(t, comb, at + M, t.inputs[0]);
    const float* src = &comb[at];
    for (I c = 0; c < M; ++c) o[i * M + c] += w * src[c];
  });
}

void iorder_bwd(const Task& t, const MoeIOrderBwdArgs& a, Memory& m) {
  const I begin = a.begin, count = a.count, M = a.M, E = a.E, k = a.k, C = a.C, per = std::max<I>(1, a.per);
  const SlotLayout layout = a.layout;
  auto& dout = in(t, m, 0);
  auto& comb = in(t, m, 1);
  auto& route = in(t, m, 2);
  auto& dcomb = out(t, m, 0);
  auto& dw = out(t, m, 1);
  need(t, dout, (begin + count) * M, t.inputs[0]);
  need(t, route, count * k * 3, t.inputs[2]);
  need(t, dcomb, comb.size(), t.outputs[0]);
  need(t, dw, count * k, t.outputs[1]);
  std::fill(dcomb.begin(), dcomb.end(), 0.0f);
  std::fill(dw.begin(), dw.begin() + count * k, 0.0f);  // dropped choices get no gradient
  for_each_kept(route, count, k, [&](I i, I j, I e, I slot, float w) {
    const std::size_t at = slot_at(layout, i, e, slot, E, C, M, per);
    need(t, comb, at + M, t.inputs[1]);
    const float* g = &dout[(begin + i) * M];
    float s = 0;
    for (I c = 0; c < M; ++c) {
      dcomb[at + c] += w * g[c];
      s += g[c] * comb[at + c];
    }
    dw[i * k + j] = s;
  });
}

// dx rows accumulate (Order's backward wrote them).
void gate_bwd(const Task& t, const MoeGateBwdArgs& a, Memory& m) {
  const I begin = a.begin, count = a.count, M = a.M, E = a.E, k = a.k, dw_off = a.dw_offset;
  auto& dw = in(t, m, 0);
  auto& probs = in(t, m, 1);
  auto& route = in(t, m, 2);
  auto& x = in(t, m, 3);
  auto& wg = in(t, m, 4);
  auto& dwg = out(t, m, 0);
  auto& dx = out(t, m, 1);
  need(t, dw, (dw_off + count) * k, t.inputs[0]);
  need(t, probs, count * E, t.inputs[1]);
  need(t, route, count * k * 3, t.inputs[2]);
  need(t, x, (begin + count) * M, t.inputs[3]);
  need(t, wg, M * E, t.inputs[4]);
  need(t, dwg, M * E, t.outputs[0]);
  need(t, dx, count * M, t.outputs[1]);
  std::fill(dwg.begin(), dwg.end(), 0.0f);
  std::vector<float> dp(E), dl(E);
  for (I i = 0; i < count; ++i) {
    std::fill(dp.begin(), dp.end(), 0.0f);
    for (I j = 0; j < k; ++j) {
      const float* r = &route[(i * k + j) * 3];
      if (r[1] >= 0) dp[static_cast<I>(r[0])] += dw[(dw_off + i) * k + j];
    }
    const float* p = &probs[i * E];
    float dot = 0;
    for (I e = 0; e < E; ++e) dot += p[e] * dp[e];
    for (I e = 0; e < E; ++e) dl[e] = p[e] * (dp[e] - dot);
    const float* xr = &x[(begin + i) * M];
    float* dxr = &dx[i * M];
    for (I c = 0; c < M; ++c) {
      float s = 0;
      for (I e = 0; e < E; ++e) {
        dwg[c * E + e] += xr[c] * dl[e];
        s += dl[e] * wg[c * E + e];
      }
      dxr[c] += s;
    }
  }
}

}  // namespace

namespace {
// The table's entry for kernel f: its role follows from its arguments' type.
template <class A>
void add(KernelTable& k, void (*f)(const Task&, const A&, Memory&)) {
  k[role_for<A>] = [f](const Task& t, Memory& m) { f(t, std::get<A>(t.compute().args), m); };
}
}  // namespace

KernelTable moe_kernels() {
  KernelTable k;
  add(k, gate), add(k, order), add(k, order_bwd), add(k, slot_slice), add(k, experts), add(k, experts_bwd);
  add(k, iorder), add(k, iorder_bwd), add(k, gate_bwd);
  return k;
}

}  // namespace parmsim::exec
