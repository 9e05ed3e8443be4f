#pragma once
// Least-squares fits of t = alpha + beta * n (the paper's cost model, docs/parm.md) and the
// error of a fit on points it did not see.
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace parmsim::calib {

struct Point {
  double x = 0;  // bytes or FLOPs
  double t = 0;  // seconds
};

// The longest time a measured row (an nccl-tests size, a kernel) may hold: one
// hour, 3.6e9 us. nccl-tests times each size over its warm-up and `iters`
// iterations and a whole sweep takes minutes; the largest size it is commonly
// run to (-e 16G) over the slowest link parmsim models (1 Gb/s Ethernet) takes
// about 140 s. A row of an hour or more is a unit mistake or a corrupt value
// (1e300 us), not a measurement; the bound is far inside the simulator's range
// (2^63 ps, about 106 days), so a refused row never reaches an overflow.
inline constexpr double kMaxMeasuredUs = 3.6e9;
// "" when `us` is a measured time: finite, above 0 and at most kMaxMeasuredUs;
// else what is wrong with it ("not finite", ...), for an error message.
std::string measured_time_error(double us);

struct AlphaBeta {
  double alpha = 0;  // seconds
  double beta = 0;   // seconds per unit of x
  double at(double x) const { return alpha + beta * x; }
};

// Ordinary least squares on (x, t). With points spanning decades, the large
// ones dominate the residual; `relative` weights each point by 1/t^2 so that
// small messages count as much as large ones (what a percentage error needs).
// Throws UserError with fewer than two distinct x.
AlphaBeta fit_alpha_beta(const std::vector<Point>& pts, bool relative = true);

struct HeldOut {
  AlphaBeta fit;
  std::vector<Point> train, test;
  double mape = 0;   // mean |pred - t| / t over the test points
  double worst = 0;  // max of the same
};
// Fits on every other point (sorted by x, starting with the first) and
// reports the error on the rest.
HeldOut fit_held_out(std::vector<Point> pts, bool relative = true);

// Linear interpolation in (log x, log t) between the two nearest of `pts`
// ((x, t), sorted by x, all positive); nullopt outside [front.x, back.x] or
// with fewer than one point. At a measured x: that point's t.
std::optional<double> interpolate_log_log(const std::vector<std::pair<double, double>>& pts, double x);

// A measured curve: the points themselves within their range (log-log
// interpolation), the alpha-beta line fitted to them (relative weights) beyond it.
struct Curve {
  std::vector<std::pair<double, double>> points;  // (x, seconds), sorted, distinct x > 0
  AlphaBeta line;
  double at(double x) const;
};
// Sorts the points, drops x <= 0 (nccl-tests prints 0-byte rows) and fits the
// line. Throws UserError for an x given twice (repeated sizes are refused where
// they are read, never averaged) and with fewer than two distinct x > 0.
Curve fit_curve(std::vector<Point> pts);

// Held-out errors of a curve and of its line alone: each point in turn is left
// out, the curve and line are fitted to the others and predict it (the two
// end points fall outside the others' range, so the curve predicts them with
// its line). `errors` are signed, (predicted - measured) / measured.
struct LeftOut {
  Point p;
  double curve = 0, line = 0;
};
// Every point in turn (needs three or more distinct x).
std::vector<LeftOut> leave_one_out(const std::vector<Point>& pts);
// Only x == held (every other point fitted): one entry, or none when no point has that x.
std::vector<LeftOut> hold_out(const std::vector<Point>& pts, double held);

}  // namespace parmsim::calib
