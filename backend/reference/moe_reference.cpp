#include "backend/reference/moe_reference.hpp"

#include <algorithm>
#include <cmath>

namespace parmsim::ref {

MoeRefResult moe_reference(const MoeRefSpec& s, const std::vector<float>& x, const std::vector<float>& dout,
                           const std::vector<float>& Wg, const std::vector<float>& W1, const std::vector<float>& W2) {
  using I = std::int64_t;
  const I N = s.groups * s.S, M = s.M, H = s.H, E = s.E, k = s.k;
  MoeRefResult r;
  r.out.assign(N * M, 0.0);
  r.dx.assign(N * M, 0.0);
  r.dWg.assign(s.groups * M * E, 0.0);
  r.dW1.assign(E * M * H, 0.0);
  r.dW2.assign(E * H * M, 0.0);

  // Gate: probabilities and top-k for every token.
  std::vector<double> p(N * E);
  std::vector<I> choice(N * k);
  for (I t = 0; t < N; ++t) {
    double mx = -1e300;
    for (I e = 0; e < E; ++e) {
      double z = 0;
      for (I c = 0; c < M; ++c) z += static_cast<double>(x[t * M + c]) * Wg[c * E + e];
      p[t * E + e] = z;
      mx = std::max(mx, z);
    }
    double sum = 0;
    for (I e = 0; e < E; ++e) sum += (p[t * E + e] = std::exp(p[t * E + e] - mx));
    for (I e = 0; e < E; ++e) p[t * E + e] /= sum;
    // Selection of the k largest, ties to the lower index.
    std::vector<bool> taken(E, false);
    for (I j = 0; j < k; ++j) {
      I best = -1;
      for (I e = 0; e < E; ++e)
        if (!taken[e] && (best < 0 || p[t * E + e] > p[t * E + best])) best = e;
      taken[best] = true;
      choice[t * k + j] = best;
    }
  }
  // Capacity per block: choice-major, token order.
  std::vector<char> kept(N * k, 0);
  for (I b0 = 0; b0 < N; b0 += s.block) {
    std::vector<I> used(E, 0);
    for (I j = 0; j < k; ++j)
      for (I t = b0; t < b0 + s.block; ++t) {
        const I e = choice[t * k + j];
        if (used[e] < s.capacity) {
          ++used[e];
          kept[t * k + j] = 1;
        } else {
          ++r.dropped;
        }
      }
  }
  // Experts per kept choice: y = relu(x W1_e) W2_e; out = sum_j p_j y_j.
  std::vector<double> hpre(H), a(H), y(M), dy(M), dh(H);
  for (I t = 0; t < N; ++t) {
    const I g = t / s.S;
    std::vector<double> dp(E, 0.0);
    for (I j = 0; j < k; ++j) {
      if (!kept[t * k + j]) continue;
      const I e = choice[t * k + j];
      for (I q = 0; q < H; ++q) {
        double z = 0;
        for (I c = 0; c < M; ++c) z += static_cast<double>(x[t * M + c]) * W1[(e * M + c) * H + q];
        hpre[q] = z;
        a[q] = z > 0 ? z : 0;
      }
      for (I c = 0; c < M; ++c) {
        double z = 0;
        for (I q = 0; q < H; ++q) z += a[q] * W2[(e * H + q) * M + c];
        y[c] = z;
      }
      const double w = p[t * E + e];
      double dpw = 0;
      for (I c = 0; c < M; ++c) {
        r.out[t * M + c] += w * y[c];
        dpw += dout[t * M + c] * y[c];
        dy[c] = w * dout[t * M + c];
      }
      dp[e] += dpw;
      // Backward through the expert.
      for (I q = 0; q < H; ++q) {
        double z = 0;
        for (I c = 0; c < M; ++c) {
          z += dy[c] * W2[(e * H + q) * M + c];
          r.dW2[(e * H + q) * M + c] += a[q] * dy[c];
        }
        dh[q] = hpre[q] > 0 ? z : 0;
      }
      for (I c = 0; c < M; ++c) {
        double z = 0;
        for (I q = 0; q < H; ++q) {
          z += dh[q] * W1[(e * M + c) * H + q];
          r.dW1[(e * M + c) * H + q] += x[t * M + c] * dh[q];
        }
        r.dx[t * M + c] += z;
      }
    }
    // Backward through the softmax gate.
    double dot = 0;
    for (I e = 0; e < E; ++e) dot += p[t * E + e] * dp[e];
    for (I e = 0; e < E; ++e) {
      const double dl = p[t * E + e] * (dp[e] - dot);
      for (I c = 0; c < M; ++c) {
        r.dWg[(g * M + c) * E + e] += x[t * M + c] * dl;
        r.dx[t * M + c] += dl * Wg[c * E + e];
      }
    }
  }
  return r;
}

}  // namespace parmsim::ref
