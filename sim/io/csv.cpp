#include "sim/io/csv.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <sstream>

#include "sim/core/error.hpp"
#include "sim/core/utf8.hpp"
#include "sim/io/output.hpp"

namespace parmsim {

std::vector<std::string> split_csv(const std::string& line, const std::string& where) {
  // Every CSV reader splits its lines here: names reach the JSON writers only as UTF-8.
  if (const auto bad = utf8_error(line))
    throw UserError(fmt::format("{}: column {}: byte 0x{:02X} is not UTF-8; CSV files are UTF-8 text", where,
                                *bad + 1, static_cast<unsigned char>(line[*bad])));
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cur += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cur += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(cur);
      cur.clear();
    } else if (c != '\r') {
      cur += c;
    }
  }
  if (quoted) throw UserError(fmt::format("{}: unterminated quoted field", where));
  out.push_back(cur);
  return out;
}

std::string csv_field(std::string_view v) {
  if (v.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(v);
  std::string out = "\"";
  for (const char c : v) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

std::int64_t positive_int(const std::string& v, const std::string& col, const std::string& where) {
  std::int64_t x = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc() || p != v.data() + v.size() || x < 1)
    throw UserError(fmt::format("{}: column '{}': '{}' is not a positive integer", where, col, v));
  return x;
}

double positive_number(const std::string& v, const std::string& col, const std::string& where) {
  double x = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc() || p != v.data() + v.size() || !(x > 0) || !std::isfinite(x))
    throw UserError(fmt::format("{}: column '{}': '{}' is not a positive number", where, col, v));
  return x;
}


std::string CsvRow::get(const char* column) const {
  const auto it = col->find(column);
  return it == col->end() || it->second >= fields.size() ? std::string() : fields[it->second];
}

void read_csv_table(const std::string& path, std::initializer_list<const char*> required,
                    const std::function<void(const CsvRow&)>& row) {
  std::istringstream in(read_file(path));
  std::map<std::string, std::size_t> col;
  std::string line;
  int lineno = 0;
  bool header = false;
  while (std::getline(in, line)) {
    ++lineno;
    const std::string where = fmt::format("{}:{}", path, lineno);
    if (trim(line).empty() || trim(line)[0] == '#') continue;
    std::vector<std::string> f = split_csv(line, where);
    for (auto& s : f) s = trim(s);
    if (!header) {
      for (std::size_t i = 0; i < f.size(); ++i) col[f[i]] = i;
      for (const char* need : required)
        if (!col.count(need)) throw UserError(fmt::format("{}: missing column '{}'", where, need));
      header = true;
      continue;
    }
    row(CsvRow{lineno, where, &col, std::move(f)});
  }
  if (!header) throw UserError(fmt::format("{}: no header line", path));
}

}  // namespace parmsim
