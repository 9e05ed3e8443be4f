#include "sim/calib/fit.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "sim/core/error.hpp"

namespace parmsim::calib {

AlphaBeta fit_alpha_beta(const std::vector<Point>& pts, bool relative) {
  // Minimise sum w_i (alpha + beta x_i - t_i)^2: the 2x2 normal equations.
  double sw = 0, sx = 0, sxx = 0, st = 0, sxt = 0;
  for (const Point& p : pts) {
    const double w = relative ? 1.0 / (p.t * p.t) : 1.0;
    sw += w;
    sx += w * p.x;
    sxx += w * p.x * p.x;
    st += w * p.t;
    sxt += w * p.x * p.t;
  }
  const double det = sw * sxx - sx * sx;
  if (pts.size() < 2 || !(std::abs(det) > 1e-300 * std::max(1.0, sw * sxx)))
    throw ParmError(fmt::format("alpha-beta fit: need at least two points with different sizes (got {})", pts.size()));
  AlphaBeta ab;
  ab.beta = (sw * sxt - sx * st) / det;
  ab.alpha = (st - ab.beta * sx) / sw;
  return ab;
}

HeldOut fit_held_out(std::vector<Point> pts, bool relative) {
  std::sort(pts.begin(), pts.end(), [](const Point& a, const Point& b) { return a.x < b.x; });
  HeldOut h;
  for (std::size_t i = 0; i < pts.size(); ++i) (i % 2 == 0 ? h.train : h.test).push_back(pts[i]);
  h.fit = fit_alpha_beta(h.train, relative);
  for (const Point& p : h.test) {
    const double e = std::abs(h.fit.at(p.x) - p.t) / p.t;
    h.mape += e;
    h.worst = std::max(h.worst, e);
  }
  if (!h.test.empty()) h.mape /= static_cast<double>(h.test.size());
  return h;
}

}  // namespace parmsim::calib
