#pragma once
// Small CSV helpers for the validation tables (validation/*.csv): one header
// line, '#' lines are comments, fields may be double-quoted ("" inside quotes
// is a quote).
#include <cstdint>
#include <string>
#include <vector>

namespace parmsim {

// Splits one line; throws ParmError "WHERE: unterminated quoted field".
std::vector<std::string> split_csv(const std::string& line, const std::string& where);
std::string trim(const std::string& s);
// Parse a whole field or throw ParmError "WHERE: column 'COL': 'V' is not a positive ...".
std::int64_t positive_int(const std::string& v, const std::string& col, const std::string& where);
double positive_number(const std::string& v, const std::string& col, const std::string& where);

}  // namespace parmsim
