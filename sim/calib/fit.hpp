#pragma once
// Least-squares fits of t = alpha + beta * n (the paper's cost model, docs/parm.md) and the
// error of a fit on points it did not see.
#include <string>
#include <vector>

namespace parmsim::calib {

struct Point {
  double x = 0;  // bytes or FLOPs
  double t = 0;  // seconds
};

struct AlphaBeta {
  double alpha = 0;  // seconds
  double beta = 0;   // seconds per unit of x
  double at(double x) const { return alpha + beta * x; }
};

// Ordinary least squares on (x, t). With points spanning decades, the large
// ones dominate the residual; `relative` weights each point by 1/t^2 so that
// small messages count as much as large ones (what a percentage error needs).
// Throws ParmError with fewer than two distinct x.
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

}  // namespace parmsim::calib
