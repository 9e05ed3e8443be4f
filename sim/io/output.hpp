#pragma once
// Result files. Every file is written to a temporary file beside it
// ("<path>.tmp.<pid>.<n>", created exclusively) and renamed into place, so a
// crash or an error never leaves a half-written output.
//
// What an output path may be: a regular file (replaced, keeping its mode) or
// a path that does not exist yet; the folders it names that do not exist yet
// are made when it is written (`-o out/x.csv` on a fresh checkout makes out/). A symbolic link,
// directory, device, FIFO or socket is refused, never written through, and so
// is a file the command reads (compared by device and inode, so ./x and x,
// hard links and links to it all match).
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "sim/core/time.hpp"

namespace parmsim {

// Writes `path` through a temporary file. Refuses (UserError naming the path)
// what check_output_path refuses. Inside an OutputBatch the file is renamed
// into place when the batch commits; otherwise at once.
void write_atomically(const std::string& path, const std::function<void(std::ostream&)>& fill);

// A file named on the command line or in an input file, with what it is
// ("--output", "the sweep spec", "topology file").
struct NamedPath {
  std::string what;
  std::string path;
};

// Records a file this process reads as input (YamlReader::load_file does for
// every YAML/JSON input): write_atomically refuses to replace it.
void note_input_file(const std::string& path);
// Whether two paths name the same existing file (st_dev and st_ino).
bool same_file(const std::string& a, const std::string& b);
// The largest input file read_file takes: 64 MiB. The largest input parmsim
// ships is under 1 MiB; a 16,384-GPU topology written out link by link is
// under 8 MiB. Parsed YAML takes tens of bytes per byte of text, so the
// bound also keeps a misnamed input from exhausting memory before it is refused.
inline constexpr std::uint64_t kMaxInputBytes = std::uint64_t{64} << 20;
// The whole file as bytes. Every input file goes through it. A UserError
// naming the path when it cannot be read, is a directory, is larger than
// kMaxInputBytes, or is not a regular file (a device or FIFO: refused unless
// the environment sets PARMSIM_ALLOW_SPECIAL_INPUT=1, then read up to the bound).
std::string read_file(const std::string& path);

// Throws a one-line UserError naming `option` and `path` unless `path` may be
// written as an output: not a link, directory, device, FIFO or socket; the
// nearest of its folders that exists is a writable directory (the missing ones
// below it are made by make_output_dirs); not one of `inputs` nor a file noted
// as an input. An empty path is not an output (nothing is checked). Makes nothing.
void check_output_path(const std::string& option, const std::string& path, const std::vector<NamedPath>& inputs = {});
// Makes the folders of `path` that do not exist yet (mkdir -p of its folder),
// outermost first, and returns them; a UserError naming the path and folder
// when one cannot be made (what it made by then is removed). write_atomically
// calls it; so does a command that opens an output itself (a sweep's partial file).
std::vector<std::string> make_output_dirs(const std::string& path);
// Removes folders make_output_dirs made, innermost first, each only while empty.
void remove_output_dirs(const std::vector<std::string>& made);
// Every output of one command, as above, and no two naming the same file.
void check_outputs(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs);

// The outputs of one command appear together or not at all: while a batch is
// open, write_atomically leaves each file in its temporary; commit() renames
// them all into place (on a failure it removes what it renamed and throws);
// a batch destroyed without commit() removes its temporaries. Batches nest:
// files go to the innermost open one. Not for use from several threads.
class OutputBatch {
 public:
  OutputBatch();
  ~OutputBatch();
  OutputBatch(const OutputBatch&) = delete;
  OutputBatch& operator=(const OutputBatch&) = delete;
  void commit();
  // Files staged so far (their final paths).
  std::vector<std::string> pending() const;

 private:
  friend void write_atomically(const std::string&, const std::function<void(std::ostream&)>&);
  struct Staged {
    std::string tmp, path;
  };
  std::vector<Staged> staged_;
  std::vector<std::string> made_dirs_;  // folders made for staged files, removed unless committed
};

// Picoseconds as microseconds with all six decimals ("12.000345").
std::string us_exact(Time t);

}  // namespace parmsim
