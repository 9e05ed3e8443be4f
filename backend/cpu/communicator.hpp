#pragma once
// The host communicator: every collective of the IR on fp32 host buffers.
// Members arrive one by one (each from its own stream thread); the last to
// arrive moves the data for all of them, in member order, so sums are taken in
// one fixed order and results are the same bit for bit on every run.
#include <vector>

#include "backend/executor.hpp"

namespace parmsim::exec {

// Performs collective `c` for all members at once. Throws UserError when a
// buffer is missing or its size does not fit the collective.
void run_collective(const Collective& c, Memory& mem);

}  // namespace parmsim::exec
