#include "sim/calib/fit.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "sim/core/error.hpp"

namespace parmsim::calib {

std::string measured_time_error(double us) {
  if (!std::isfinite(us)) return "not finite";
  if (!(us > 0)) return "not above 0";
  if (us > kMaxMeasuredUs) return fmt::format("above {:.1e} us (an hour), the longest a measured row may hold", kMaxMeasuredUs);
  return "";
}

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
    throw UserError(fmt::format("alpha-beta fit: need at least two points with different sizes (got {})", pts.size()));
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

std::optional<double> interpolate_log_log(const std::vector<std::pair<double, double>>& p, double x) {
  if (p.empty() || !(x >= p.front().first) || !(x <= p.back().first)) return std::nullopt;
  auto hi = std::lower_bound(p.begin(), p.end(), x, [](const auto& a, double v) { return a.first < v; });
  if (hi->first == x || hi == p.begin()) return hi->second;
  const auto lo = hi - 1;
  const double f = (std::log(x) - std::log(lo->first)) / (std::log(hi->first) - std::log(lo->first));
  return std::exp(std::log(lo->second) + f * (std::log(hi->second) - std::log(lo->second)));
}

double Curve::at(double x) const {
  if (const auto t = interpolate_log_log(points, x)) return *t;
  return std::max(0.0, line.at(x));
}

Curve fit_curve(std::vector<Point> pts) {
  std::erase_if(pts, [](const Point& p) { return !(p.x > 0) || !(p.t > 0); });
  std::sort(pts.begin(), pts.end(), [](const Point& a, const Point& b) { return a.x < b.x; });
  Curve c;
  for (std::size_t i = 0; i < pts.size(); ++i) {
    if (i > 0 && pts[i].x == pts[i - 1].x)
      throw UserError(fmt::format("measured curve: size {:.0f} appears twice ({:.6g} and {:.6g} s); repeated sizes "
                                  "are not averaged",
                                  pts[i].x, pts[i - 1].t, pts[i].t));
    c.points.emplace_back(pts[i].x, pts[i].t);
  }
  c.line = fit_alpha_beta(pts);
  return c;
}

namespace {
std::vector<LeftOut> left_out(const std::vector<Point>& all, bool (*take)(double x, double held), double held) {
  const Curve whole = fit_curve(all);  // sorted, merged
  std::vector<LeftOut> out;
  for (const auto& [x, t] : whole.points) {
    if (!take(x, held)) continue;
    std::vector<Point> rest;
    for (const auto& [x2, t2] : whole.points)
      if (x2 != x) rest.push_back({x2, t2});
    const Curve c = fit_curve(rest);
    out.push_back({{x, t}, (c.at(x) - t) / t, (c.line.at(x) - t) / t});
  }
  return out;
}
}  // namespace

std::vector<LeftOut> leave_one_out(const std::vector<Point>& pts) {
  return left_out(pts, [](double, double) { return true; }, 0);
}

std::vector<LeftOut> hold_out(const std::vector<Point>& pts, double held) {
  return left_out(pts, [](double x, double h) { return x == h; }, held);
}

}  // namespace parmsim::calib
