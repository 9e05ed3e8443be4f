#pragma once
// The element-wise work of the MoE kernels, one call per index, shared by the
// CUDA kernels (a grid-stride loop calls operator() once per index) and the
// host emulation that the CPU tests run (a plain loop does). Keeping one body
// for both lets the CPU test suite check the GPU kernels' index arithmetic
// against the CPU reference executor.
//
// Every body reads and writes its activation type T (float, __half or
// __nv_bfloat16) through float, and keeps routing metadata (route triples:
// expert, slot, gate weight; gate probabilities; gate-weight gradients) in
// fp32 whatever T is. The layouts are the CPU kernels' (backend/cpu/moe_kernels.hpp).
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define PARMSIM_HD __host__ __device__
#else
#define PARMSIM_HD
#endif

namespace parmsim::exec::dev {

using I = std::int64_t;

template <class T>
PARMSIM_HD inline float ld(const T* p, I i) {
  return static_cast<float>(p[i]);
}
template <class T>
PARMSIM_HD inline void st(T* p, I i, float v) {
  p[i] = T(v);
}

// Where slot `slot` of expert `e` for token `t` lives in a combine-side buffer
// (as the CPU kernels): layout 0 [E, C, M]; 1 [G, E, C, M], token t's member
// t / per; 2 [G, E, C, M] with slot s at member s / C, local s % C.
PARMSIM_HD inline I slot_at(I layout, I t, I e, I slot, I E, I C, I M, I per) {
  if (layout == 0) return (e * C + slot) * M;
  if (layout == 1) return (((t / per) * E + e) * C + slot) * M;
  return (((slot / C) * E + e) * C + slot % C) * M;
}

// One routed choice: its expert, its slot (-1: dropped) and its gate weight,
// from the route triple of choice `ci` (= token * k + j).
struct Choice {
  I e, slot;
  float w;
  PARMSIM_HD bool kept() const { return slot >= 0; }
};
PARMSIM_HD inline Choice choice(const float* route, I ci) {
  const float* r = route + ci * 3;
  return {static_cast<I>(r[0]), static_cast<I>(r[1]), r[2]};
}

// ---- gate: softmax over E logits and the top k, one index per token.
struct SoftmaxTopkArgs {
  const float* logits;  // [count, E]
  float* probs;         // [count, E]
  int* top;             // [count, k], experts in choice order
  I E, k;
};
template <class T>
struct SoftmaxTopk : SoftmaxTopkArgs {
  PARMSIM_HD void operator()(I i) const {
    const float* l = logits + i * E;
    float* p = probs + i * E;
    float mx = l[0];
    for (I e = 1; e < E; ++e) mx = l[e] > mx ? l[e] : mx;
    float z = 0;
    for (I e = 0; e < E; ++e) {
      p[e] = expf_(l[e] - mx);
      z += p[e];
    }
    for (I e = 0; e < E; ++e) p[e] /= z;
    // Selection: the largest not yet chosen, the lower index on ties (the
    // CPU kernel's stable sort gives the same order).
    for (I j = 0; j < k; ++j) {
      I best = -1;
      for (I e = 0; e < E; ++e) {
        bool taken = false;
        for (I q = 0; q < j; ++q) taken = taken || top[i * k + q] == e;
        if (!taken && (best < 0 || p[e] > p[best])) best = e;
      }
      top[i * k + j] = static_cast<int>(best);
    }
  }
  PARMSIM_HD static float expf_(float x) {
#if defined(__CUDA_ARCH__)
    return ::expf(x);
#else
    return std::exp(x);
#endif
  }
};

// ---- gate: capacity slots. Choices are placed choice-major (every token's
// first choice, then every second), in token order; a choice finding its
// expert full gets slot -1 (dropped). The slot of a choice is the number of
// earlier choices of its expert, found in three passes over chunks of the
// choice-major sequence: a histogram (choices per expert and chunk), an
// exclusive scan over chunks per expert, and the assignment.
struct SlotsArgs {
  const int* top;
  const float* probs;
  float* route;  // [count, k, 3]
  int* counts;   // [E, chunks]
  I count, E, k, C, chunk, chunks;
  // Expert of choice q of the choice-major sequence (q = j * count + i).
  PARMSIM_HD I expert(I q) const { return top[(q % count) * k + q / count]; }
  PARMSIM_HD I end(I ch) const { return (ch + 1) * chunk < count * k ? (ch + 1) * chunk : count * k; }
};
template <class T>
struct SlotCount : SlotsArgs {  // one index per (expert, chunk)
  PARMSIM_HD void operator()(I idx) const {
    const I e = idx / chunks, ch = idx % chunks;
    int n = 0;
    for (I q = ch * chunk; q < end(ch); ++q) n += expert(q) == e;
    counts[idx] = n;
  }
};
template <class T>
struct SlotScan : SlotsArgs {  // one index per expert
  PARMSIM_HD void operator()(I e) const {
    int running = 0;
    for (I ch = 0; ch < chunks; ++ch) {
      const int c = counts[e * chunks + ch];
      counts[e * chunks + ch] = running;
      running += c;
    }
  }
};
template <class T>
struct SlotAssign : SlotsArgs {  // one index per (expert, chunk)
  PARMSIM_HD void operator()(I idx) const {
    const I e = idx / chunks, ch = idx % chunks;
    I fill = counts[idx];
    for (I q = ch * chunk; q < end(ch); ++q) {
      if (expert(q) != e) continue;
      const I i = q % count, j = q / count;
      float* r = route + (i * k + j) * 3;
      r[0] = static_cast<float>(e);
      r[1] = fill < C ? static_cast<float>(fill) : -1.0f;
      r[2] = probs[i * E + e];
      ++fill;
    }
  }
};

// Order is a pure copy: when a row is a whole number of 16-byte units it is
// instantiated with this type and moves rows in 16-byte pieces.
struct alignas(16) Vec16 {
  float v[4];
};

// ---- Order: scatter kept choices' rows into [E, C, M] (zeroed before); one
// index per (choice, column).
struct OrderArgs {
  const void* x;
  const float* route;
  void* disp;
  I begin, count, M, k, C;
};
template <class T>
struct Order : OrderArgs {
  PARMSIM_HD void operator()(I idx) const {
    const I ci = idx / M, col = idx % M;
    const Choice c = choice(route, ci);
    if (!c.kept()) return;
    static_cast<T*>(disp)[(c.e * C + c.slot) * M + col] = static_cast<const T*>(x)[(begin + ci / k) * M + col];
  }
};

// ---- Order backward: dx row = sum of the kept choices' rows; one index per
// (token, column). layout 2 reads [G, E, Tl, M] with C = Tl.
struct OrderBwdArgs {
  const void* dd;
  const float* route;
  void* dx;
  I M, E, k, C, layout;
};
template <class T>
struct OrderBwd : OrderBwdArgs {
  PARMSIM_HD void operator()(I idx) const {
    const I i = idx / M, col = idx % M;
    float s = 0;
    for (I j = 0; j < k; ++j) {
      const Choice c = choice(route, i * k + j);
      if (c.kept()) s += ld(static_cast<const T*>(dd), slot_at(layout == 2 ? 2 : 0, i, c.e, c.slot, E, C, M, 1) + col);
    }
    st(static_cast<T*>(dx), i * M + col, s);
  }
};

// ---- slot slice: this MP member's share of every expert's slots; one index
// per output element.
struct SlotSliceArgs {
  const void* src;
  void* dst;
  I C, Tl, M, member;
};
template <class T>
struct SlotSlice : SlotSliceArgs {
  PARMSIM_HD void operator()(I idx) const {
    const I col = idx % M, s = (idx / M) % Tl, e = idx / (M * Tl);
    const I from = member * Tl + s;
    static_cast<T*>(dst)[idx] = from < C ? static_cast<const T*>(src)[(e * C + from) * M + col] : T(0.0f);
  }
};

// ---- ReLU, and its backward mask; one index per element.
struct ReluArgs {
  const void* in;
  void* out;
};
template <class T>
struct Relu : ReluArgs {
  PARMSIM_HD void operator()(I i) const {
    const float v = ld(static_cast<const T*>(in), i);
    st(static_cast<T*>(out), i, v > 0 ? v : 0.0f);
  }
};
struct ReluMaskArgs {
  void* grad;       // in place
  const void* pre;  // pre-activation
};
template <class T>
struct ReluMask : ReluMaskArgs {
  PARMSIM_HD void operator()(I i) const {
    if (!(ld(static_cast<const T*>(pre), i) > 0)) st(static_cast<T*>(grad), i, 0.0f);
  }
};

// ---- I-Order: gate-weighted sum of the kept choices' rows; one index per
// (token, column).
struct IOrderArgs {
  const void* comb;
  const float* route;
  void* out;
  I M, E, k, C, layout, per;
};
template <class T>
struct IOrder : IOrderArgs {
  PARMSIM_HD void operator()(I idx) const {
    const I i = idx / M, col = idx % M;
    float s = 0;
    for (I j = 0; j < k; ++j) {
      const Choice c = choice(route, i * k + j);
      if (c.kept()) s += c.w * ld(static_cast<const T*>(comb), slot_at(layout, i, c.e, c.slot, E, C, M, per) + col);
    }
    st(static_cast<T*>(out), i * M + col, s);
  }
};

// ---- I-Order backward, the combine-buffer gradient (zeroed before; each slot
// holds one choice); one index per (choice, column).
struct IOrderBwdArgs {
  const void* dout;  // rows from `begin`
  const void* comb;
  const float* route;
  void* dcomb;
  float* dw;  // [count, k]
  I begin, M, E, k, C, layout, per;
};
template <class T>
struct IOrderBwdComb : IOrderBwdArgs {
  PARMSIM_HD void operator()(I idx) const {
    const I ci = idx / M, col = idx % M, i = ci / k;
    const Choice c = choice(route, ci);
    if (!c.kept()) return;
    const I at = slot_at(layout, i, c.e, c.slot, E, C, M, per);
    st(static_cast<T*>(dcomb), at + col, c.w * ld(static_cast<const T*>(dout), (begin + i) * M + col));
  }
};
// ... and the gate-weight gradient: one index per choice.
template <class T>
struct IOrderBwdWeight : IOrderBwdArgs {
  PARMSIM_HD void operator()(I ci) const {
    const I i = ci / k;
    const Choice c = choice(route, ci);
    float s = 0;
    if (c.kept()) {
      const I at = slot_at(layout, i, c.e, c.slot, E, C, M, per);
      for (I col = 0; col < M; ++col)
        s += ld(static_cast<const T*>(dout), (begin + i) * M + col) * ld(static_cast<const T*>(comb), at + col);
    }
    dw[ci] = s;
  }
};

// ---- gate backward: the logits' gradient of the softmax, one index per
// token: dl[e] = p[e] (dp[e] - sum_e' p[e'] dp[e']), dp[e] the gradients of
// the kept choices of expert e.
struct GateDlArgs {
  const float* dw;  // from dw_off tokens in
  const float* probs;
  const float* route;
  void* dl;  // [count, E], activation type
  I E, k, dw_off;
};
template <class T>
struct GateDl : GateDlArgs {
  PARMSIM_HD void operator()(I i) const {
    const float* p = probs + i * E;
    float dot = 0;
    for (I j = 0; j < k; ++j) {
      const Choice c = choice(route, i * k + j);
      if (c.kept()) dot += p[c.e] * dw[(dw_off + i) * k + j];
    }
    for (I e = 0; e < E; ++e) {
      float dp = 0;
      for (I j = 0; j < k; ++j) {
        const Choice c = choice(route, i * k + j);
        if (c.kept() && c.e == e) dp += dw[(dw_off + i) * k + j];
      }
      st(static_cast<T*>(dl), i * E + e, p[e] * (dp - dot));
    }
  }
};

// ---- conversions between fp32 host data and the activation type.
struct CastArgs {
  const void* in;
  void* out;
};
template <class T>
struct ToAct : CastArgs {  // float -> T
  PARMSIM_HD void operator()(I i) const { st(static_cast<T*>(out), i, static_cast<const float*>(in)[i]); }
};
template <class T>
struct FromAct : CastArgs {  // T -> float
  PARMSIM_HD void operator()(I i) const { static_cast<float*>(out)[i] = ld(static_cast<const T*>(in), i); }
};

}  // namespace parmsim::exec::dev
