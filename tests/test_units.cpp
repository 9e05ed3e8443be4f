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

TEST_CASE("byte counts print in the largest binary unit", "[units]") {
  CHECK(u::format_bytes(512) == "512B");
  CHECK(u::format_bytes(4096) == "4KiB");
  CHECK(u::format_bytes(64ULL << 20) == "64MiB");
  CHECK(u::format_bytes(3ULL << 30) == "3GiB");
  // 69888 MiB = 68.25 GiB; 1.5 MiB + 1 B is not a whole MiB.
  CHECK(u::format_bytes(69888ULL << 20) == "68.25GiB");
  CHECK(u::format_bytes((3ULL << 19) + 1) == "1.5MiB");
}
