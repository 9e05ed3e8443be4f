#pragma once
// Quantities with units, as written in YAML and on the command line.
//   bandwidth: 450GBps, 25GB/s, 100Gbps, 1.5TBps   (B = bytes, b = bits; SI prefixes)
//   time:      2us, 500ns, 1.2ms, 3s, 800ps
//   size:      64MiB, 1GiB, 4KB, 1024B            (KiB/MiB/GiB binary, KB/MB/GB decimal)
//   rate:      312TFLOPs, 989TFLOP/s               (floating point operations per second)
// A bare number where a unit is required is an error.
#include <cstdint>
#include <optional>
#include <string>

#include "sim/core/time.hpp"

namespace parmsim::units {

// Each returns nullopt with `why` set when the text is not a valid quantity.
std::optional<std::uint64_t> parse_bandwidth(const std::string& s, std::string* why);  // bytes/s
std::optional<Time> parse_time(const std::string& s, std::string* why);
std::optional<std::uint64_t> parse_size(const std::string& s, std::string* why);  // bytes
std::optional<double> parse_flops(const std::string& s, std::string* why);        // FLOP/s

std::string format_bytes(std::uint64_t b);  // "64MiB" when exact, else bytes

}  // namespace parmsim::units
