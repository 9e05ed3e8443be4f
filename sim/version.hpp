#pragma once
namespace parmsim {
inline constexpr const char* kVersion = "0.1.0";
}
