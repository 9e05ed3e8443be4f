// One libFuzzer target: the loader named by PARMSIM_FUZZ_TARGET (fuzz/loaders.hpp).
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/loaders.hpp"
#include "sim/core/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const parmsim::fuzz::Loader load = parmsim::fuzz::loader(PARMSIM_FUZZ_TARGET);
  try {
    load(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const parmsim::UserError&) {
    // the loader refused the input, with a message: what it should do
  }
  return 0;
}
