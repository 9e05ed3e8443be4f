#pragma once
// Small CSV helpers for the validation tables (validation/*.csv): one header
// line, '#' lines are comments, fields may be double-quoted ("" inside quotes
// is a quote).
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace parmsim {

// Splits one line; throws UserError "WHERE: unterminated quoted field".
std::vector<std::string> split_csv(const std::string& line, const std::string& where);
// One field as RFC 4180 writes it: as is, or in double quotes (quotes doubled)
// when it holds a comma, a quote or a line break. split_csv reads it back.
std::string csv_field(std::string_view v);
std::string trim(const std::string& s);
// Parse a whole field or throw UserError "WHERE: column 'COL': 'V' is not a positive ...".
std::int64_t positive_int(const std::string& v, const std::string& col, const std::string& where);
double positive_number(const std::string& v, const std::string& col, const std::string& where);

// One data row of a table: its fields by column name (trimmed; "" when absent).
struct CsvRow {
  int line = 0;
  std::string where;  // "FILE:LINE", for messages
  const std::map<std::string, std::size_t>* col = nullptr;
  std::vector<std::string> fields;
  std::string get(const char* column) const;
};

// Reads `path`: skips blank and '#' lines, takes the first other line as the
// header (throws "FILE:LINE: missing column 'X'" unless every `required`
// column is there), and calls `row` for every data line. Throws when the file
// cannot be opened or has no header.
void read_csv_table(const std::string& path, std::initializer_list<const char*> required,
                    const std::function<void(const CsvRow&)>& row);

}  // namespace parmsim
