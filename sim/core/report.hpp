#pragma once
// The lines a command prints for a failure that ends it: cli/main.cpp for its
// own, and MPI rank 0 for another rank's (sim/sweep/runner.cpp).
#include <string>

#include "sim/version.hpp"

namespace parmsim {

// `internal`: an InternalError or another exception no check turned into a
// UserError (exit 3, a bug to report); else the user's error (exit 1).
inline std::string error_lines(bool internal, const std::string& what) {
  if (!internal) return "parmsim: error: " + what + "\n";
  return "parmsim: internal error: " + what + "\nparmsim: this is a bug in parmsim " + std::string(kVersion) +
         "; please report it with the command line and its input files\n";
}

}  // namespace parmsim
