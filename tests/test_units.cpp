#include <catch2/catch.hpp>

#include "sim/core/units.hpp"

namespace u = parmsim::units;

TEST_CASE("bandwidths parse in bytes and bits per second", "[units]") {
  std::string why;
  CHECK(*u::parse_bandwidth("450GBps", &why) == 450'000'000'000ULL);
  CHECK(*u::parse_bandwidth("25GB/s", &why) == 25'000'000'000ULL);
  CHECK(*u::parse_bandwidth("100Gbps", &why) == 12'500'000'000ULL);  // 100e9 / 8
  CHECK(*u::parse_bandwidth("1.5TBps", &why) == 1'500'000'000'000ULL);
}

TEST_CASE("times and sizes parse with their units", "[units]") {
  std::string why;
  CHECK(u::parse_time("2us", &why)->count_ps() == 2'000'000);
  CHECK(u::parse_time("500ns", &why)->count_ps() == 500'000);
  CHECK(u::parse_time("1.2ms", &why)->count_ps() == 1'200'000'000);
  CHECK(*u::parse_size("64MiB", &why) == 67'108'864ULL);
  CHECK(*u::parse_size("4KB", &why) == 4000ULL);
  CHECK(*u::parse_flops("312TFLOPs", &why) == Approx(312e12));
}

TEST_CASE("values without units or with bad ones are rejected with a reason", "[units]") {
  std::string why;
  CHECK_FALSE(u::parse_bandwidth("450", &why));
  CHECK_THAT(why, Catch::Contains("bare number"));
  CHECK_FALSE(u::parse_bandwidth("0GBps", &why));
  CHECK_THAT(why, Catch::Contains("positive"));
  CHECK_FALSE(u::parse_bandwidth("-3GBps", &why));
  CHECK_THAT(why, Catch::Contains("negative"));
  CHECK_FALSE(u::parse_time("3 parsecs", &why));
  CHECK_THAT(why, Catch::Contains("unknown unit 'parsecs'"));
  CHECK_FALSE(u::parse_size("", &why));
}

TEST_CASE("a size is a whole number of bytes; fractions of a larger unit that are whole pass", "[units]") {
  std::string why;
  // 1.5 B and 0.3 B are no byte counts (they rounded to 2 and 0 before).
  CHECK_FALSE(u::parse_size("1.5B", &why));
  CHECK_THAT(why, Catch::Contains("a whole number of bytes, got '1.5B' (1.5 bytes)"));
  CHECK_FALSE(u::parse_size("0.3B", &why));
  // 1.5 KiB = 1536 B, 0.1 MB = 100000 B, 2.5 KB = 2500 B: whole.
  CHECK(*u::parse_size("1.5KiB", &why) == 1536ULL);
  CHECK(*u::parse_size("0.1MB", &why) == 100'000ULL);
  CHECK(*u::parse_size("2.5KB", &why) == 2500ULL);
  // 1.0001 KiB = 1024.1024 B: not whole.
  CHECK_FALSE(u::parse_size("1.0001KiB", &why));
}

TEST_CASE("byte counts print in the largest binary unit", "[units]") {
  CHECK(u::format_bytes(512) == "512B");
  CHECK(u::format_bytes(4096) == "4KiB");
  CHECK(u::format_bytes(64ULL << 20) == "64MiB");
  CHECK(u::format_bytes(3ULL << 30) == "3GiB");
  // 69888 MiB = 68.25 GiB; 1.5 MiB + 1 B is not a whole MiB.
  CHECK(u::format_bytes(69888ULL << 20) == "68.25GiB");
  CHECK(u::format_bytes((3ULL << 19) + 1) == "1.5MiB");
}
