#pragma once
#include <stdexcept>
#include <string>

namespace parmsim {

// Every user-facing failure (bad input, impossible configuration, stuck graph)
// is a ParmError whose message is complete: it names the file, line, key or
// tasks involved. The command prints it as is and exits non-zero.
class ParmError : public std::runtime_error {
 public:
  explicit ParmError(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace parmsim
