#pragma once
#include <stdexcept>
#include <string>
#include <utility>

namespace parmsim {

// Two kinds of failure, told apart by type, never by their text:
//
// UserError: the user's mistake or an impossible request (bad input, an
// impossible configuration, a stuck graph). Its message is complete: it names
// the file, line, key, option or tasks involved. The command prints it on one
// line and exits 1.
class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& what) : std::runtime_error(what) {}
};

// A time past 2^63 ps: a UserError (the inputs' sizes against the rates), of
// its own type so that a caller can say which input caused it. `cause` names
// that input once a layer knows it (a calibration file's entry, an option, a
// sweep row); a layer further out adds its own context and keeps the type.
class TimeOverflow : public UserError {
 public:
  explicit TimeOverflow(const std::string& what, std::string cause = "")
      : UserError(what), cause_(std::move(cause)) {}
  const std::string& cause() const { return cause_; }

 private:
  std::string cause_;
};

// ReportedElsewhere: this process failed, or another one it works with did,
// and the message is printed by another process (MPI rank 0). The command
// prints nothing and exits 1.
class ReportedElsewhere : public UserError {
 public:
  explicit ReportedElsewhere(const std::string& what) : UserError(what) {}
};

// Throws `what` (a message that adds context to e's) as e's kind: a
// TimeOverflow stays one, with its cause, so that a caller further out can
// still tell it by type.
[[noreturn]] inline void rethrow_with(const UserError& e, const std::string& what) {
  if (const auto* o = dynamic_cast<const TimeOverflow*>(&e)) throw TimeOverflow(what, o->cause());
  throw UserError(what);
}

// InternalError: an invariant of parmsim itself is broken, whatever the input.
// The command prints it with a request to report it and exits 3.
class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& what) : std::logic_error(what) {}
};

// A value as an error message quotes it: whole up to 60 bytes, else its first
// 60 bytes (cut at a UTF-8 character boundary) and how long it was, so a
// message never echoes a whole misread file.
inline std::string excerpt(const std::string& v) {
  constexpr std::size_t kMax = 60;
  if (v.size() <= kMax) return v;
  std::size_t n = kMax;
  while (n > 0 && (static_cast<unsigned char>(v[n]) & 0xC0) == 0x80) --n;  // not inside a character
  return v.substr(0, n) + "... (" + std::to_string(v.size()) + " bytes)";
}

}  // namespace parmsim
