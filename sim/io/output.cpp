#include "sim/io/output.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>

#include "sim/core/error.hpp"

namespace parmsim {

namespace {

// "64 MiB": the input bound as messages give it.
std::string units_text(std::uint64_t bytes) {
  return fmt::format("{} MiB", bytes >> 20);
}

std::mutex& io_mutex() {
  static std::mutex m;
  return m;
}
// Files noted as inputs: path, device, inode.
struct Noted {
  std::string path;
  dev_t dev;
  ino_t ino;
};
std::vector<Noted>& noted_inputs() {
  static std::vector<Noted> v;
  return v;
}
// Open batches, innermost last.
std::vector<OutputBatch*>& open_batches() {
  static std::vector<OutputBatch*> v;
  return v;
}

std::string absolute_path(const std::string& p) {
  std::error_code ec;
  const auto a = std::filesystem::absolute(p, ec);
  return ec ? p : a.lexically_normal().string();
}

// The folder a path is in ("." for a bare name); of "a/b/" it is "a".
std::string output_dir(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const auto slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return p.substr(0, slash);
}

const char* kind_of_file(mode_t m) {
  if (S_ISLNK(m)) return "a symbolic link";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

// Renames a finished temporary over `path`, checking once more that `path`
// is still a regular file or absent; removes the temporary on failure.
void rename_into_place(const std::string& tmp, const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    ::unlink(tmp.c_str());
    throw UserError(fmt::format("output: '{}' became {} while it was being written; not replaced", path,
                                kind_of_file(st.st_mode)));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw UserError(fmt::format("output: '{}': cannot rename into place: {}", path, why));
  }
}

}  // namespace

void note_input_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;
  std::lock_guard<std::mutex> lk(io_mutex());
  auto& v = noted_inputs();
  for (const Noted& n : v)
    if (n.dev == st.st_dev && n.ino == st.st_ino && n.path == path) return;
  v.push_back({path, st.st_dev, st.st_ino});
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

void check_output_path(const std::string& option, const std::string& path, const std::vector<NamedPath>& inputs) {
  if (path.empty()) return;
  const std::string who = option.empty() ? "output" : option;
  auto fail = [&](const std::string& why) { throw UserError(fmt::format("{}: '{}' {}", who, path, why)); };
  const std::string rest = "; outputs are written only to regular files or to new paths";
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (S_ISLNK(st.st_mode))
      fail("is a symbolic link; parmsim does not write through links (give the target's path)");
    if (!S_ISREG(st.st_mode)) fail(fmt::format("is {}{}", kind_of_file(st.st_mode), rest));
    for (const NamedPath& in : inputs)
      if (!in.path.empty() && same_file(path, in.path))
        fail(in.path == path ? fmt::format("is {}, an input of this command; refusing to overwrite it", in.what)
                             : fmt::format("is {} ('{}'), an input of this command; refusing to overwrite it", in.what,
                                           in.path));
    {
      // The same inode, still under the path it was read from (a deleted
      // input's inode number may have gone to a new file since).
      std::lock_guard<std::mutex> lk(io_mutex());
      for (const Noted& n : noted_inputs()) {
        struct stat now {};
        if (n.dev == st.st_dev && n.ino == st.st_ino && ::stat(n.path.c_str(), &now) == 0 && now.st_dev == n.dev &&
            now.st_ino == n.ino)
          fail("is a file this command reads as input; refusing to overwrite it");
      }
    }
  } else if (errno != ENOENT && errno != ENOTDIR) {  // ENOTDIR: a folder of it is a file (said below)
    fail(fmt::format("cannot be checked: {}", std::strerror(errno)));
  } else if (path.back() == '/') {
    fail("names a directory; give a file name");
  }
  // The temporary file and the rename need the directory, writable; missing folders are made
  // when the file is written (make_output_dirs), inside the nearest one that exists.
  std::string dir = output_dir(path);
  struct stat ds {};
  while (::stat(dir.c_str(), &ds) != 0) {
    if (errno != ENOENT && errno != ENOTDIR)
      fail(fmt::format("cannot be created: directory '{}': {}", dir, std::strerror(errno)));
    const std::string up = output_dir(dir);
    if (up == dir) fail(fmt::format("cannot be created: directory '{}' does not exist", dir));
    dir = up;
  }
  if (!S_ISDIR(ds.st_mode)) fail(fmt::format("cannot be created: '{}' is not a directory", dir));
  if (::access(dir.c_str(), W_OK) != 0)
    fail(fmt::format("cannot be written: directory '{}': {}", dir, std::strerror(errno)));
}

std::vector<std::string> make_output_dirs(const std::string& path) {
  std::vector<std::string> missing;
  struct stat ds {};
  for (std::string dir = output_dir(path); ::stat(dir.c_str(), &ds) != 0 && errno == ENOENT;) {
    missing.push_back(dir);
    const std::string up = output_dir(dir);
    if (up == dir) break;
    dir = up;
  }
  std::vector<std::string> made;
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (::mkdir(it->c_str(), 0777) != 0 && errno != EEXIST) {
      const std::string why = std::strerror(errno);
      remove_output_dirs(made);
      throw UserError(fmt::format("output: '{}': cannot create the folder '{}': {}", path, *it, why));
    }
    made.push_back(*it);
  }
  return made;
}

void remove_output_dirs(const std::vector<std::string>& made) {
  for (auto it = made.rbegin(); it != made.rend(); ++it) ::rmdir(it->c_str());  // only while empty
}

void check_outputs(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs) {
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].path.empty()) continue;
    check_output_path(outputs[i].what, outputs[i].path, inputs);
    for (std::size_t j = 0; j < i; ++j)
      if (!outputs[j].path.empty() && (absolute_path(outputs[j].path) == absolute_path(outputs[i].path) ||
                                       same_file(outputs[j].path, outputs[i].path)))
        throw UserError(fmt::format("{}: '{}' is also the {} output; give each output its own file", outputs[i].what,
                                    outputs[i].path, outputs[j].what));
  }
}

OutputBatch::OutputBatch() {
  open_batches().push_back(this);
}

OutputBatch::~OutputBatch() {
  auto& v = open_batches();
  v.erase(std::remove(v.begin(), v.end(), this), v.end());
  for (const Staged& s : staged_) ::unlink(s.tmp.c_str());
  remove_output_dirs(made_dirs_);  // uncommitted: the folders made for it go too, while empty
}

std::vector<std::string> OutputBatch::pending() const {
  std::vector<std::string> out;
  for (const Staged& s : staged_) out.push_back(s.path);
  return out;
}

void OutputBatch::commit() {
  auto& v = open_batches();
  v.erase(std::remove(v.begin(), v.end(), this), v.end());
  std::vector<Staged> staged;
  staged.swap(staged_);
  std::vector<std::string> made;
  made.swap(made_dirs_);
  std::vector<std::string> renamed;
  for (std::size_t i = 0; i < staged.size(); ++i) {
    try {
      rename_into_place(staged[i].tmp, staged[i].path);
    } catch (...) {
      // All or none: the others' temporaries and what is already in place go.
      for (std::size_t j = i + 1; j < staged.size(); ++j) ::unlink(staged[j].tmp.c_str());
      for (const std::string& p : renamed) ::unlink(p.c_str());
      remove_output_dirs(made);
      throw;
    }
    renamed.push_back(staged[i].path);
  }
}

void write_atomically(const std::string& path, const std::function<void(std::ostream&)>& fill) {
  check_output_path("", path);
  OutputBatch* batch = open_batches().empty() ? nullptr : open_batches().back();
  const std::string abs = absolute_path(path);
  for (const OutputBatch* b : open_batches())
    for (const OutputBatch::Staged& s : b->staged_)
      if (absolute_path(s.path) == abs)
        throw UserError(fmt::format("output: '{}' is written twice by this command; give each output its own file",
                                    path));
  const std::vector<std::string> made = make_output_dirs(path);
  // Replacing a regular file keeps its permissions.
  struct stat st {};
  const bool existed = ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  static std::atomic<unsigned> counter{0};
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    tmp = fmt::format("{}.tmp.{}.{}", path, ::getpid(), counter.fetch_add(1));
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    const std::string why = std::strerror(errno);
    remove_output_dirs(made);
    throw UserError(fmt::format("output: '{}': cannot write: {}", path, why));
  }
  if (existed) (void)::fchmod(fd, st.st_mode & 07777);
  ::close(fd);
  try {
    std::ofstream os(tmp, std::ios::binary | std::ios::trunc);
    if (!os) throw UserError(fmt::format("output: '{}': cannot write: {}", path, std::strerror(errno)));
    fill(os);
    os.flush();
    if (!os) throw UserError(fmt::format("output: '{}': write failed: {}", path, std::strerror(errno)));
    os.close();
    if (!os) throw UserError(fmt::format("output: '{}': write failed: {}", path, std::strerror(errno)));
  } catch (...) {
    ::unlink(tmp.c_str());
    remove_output_dirs(made);
    throw;
  }
  if (batch) {
    batch->staged_.push_back({tmp, path});
    batch->made_dirs_.insert(batch->made_dirs_.end(), made.begin(), made.end());
    return;
  }
  try {
    rename_into_place(tmp, path);
  } catch (...) {
    remove_output_dirs(made);
    throw;
  }
}

std::string us_exact(Time t) {
  const std::int64_t ps = t.count_ps();
  const char* sign = ps < 0 ? "-" : "";
  const std::uint64_t a = ps < 0 ? static_cast<std::uint64_t>(-ps) : static_cast<std::uint64_t>(ps);
  return fmt::format("{}{}.{:06d}", sign, a / 1000000, a % 1000000);
}

std::string read_file(const std::string& path) {
  // What the path is, before it is opened: opening a FIFO would wait for a
  // writer, and a device may never end.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw UserError(fmt::format("{}: cannot open file: {}", path, std::strerror(errno)));
  if (S_ISDIR(st.st_mode)) throw UserError(fmt::format("{}: is a directory, not an input file", path));
  const bool regular = S_ISREG(st.st_mode);
  if (!regular) {
    const char* allow = std::getenv("PARMSIM_ALLOW_SPECIAL_INPUT");
    if (!allow || std::string_view(allow) != "1")
      throw UserError(
          fmt::format("{}: not a regular file (a device, FIFO or socket); inputs are read from files "
                      "(PARMSIM_ALLOW_SPECIAL_INPUT=1 reads it anyway, up to {})",
                      path, units_text(kMaxInputBytes)));
  } else if (static_cast<std::uint64_t>(st.st_size) > kMaxInputBytes) {
    throw UserError(fmt::format("{}: {} bytes; an input file may hold at most {} (no parmsim input needs more)", path,
                                st.st_size, units_text(kMaxInputBytes)));
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw UserError(fmt::format("{}: cannot open file: {}", path, std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (::fstat(fd, &st) != 0 || S_ISREG(st.st_mode) != regular)
    throw UserError(fmt::format("{}: changed while it was being opened", path));
  std::string text;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw UserError(fmt::format("{}: cannot read file: {}", path, std::strerror(errno)));
    if (n == 0) break;
    if (text.size() + static_cast<std::size_t>(n) > kMaxInputBytes)
      throw UserError(
          fmt::format("{}: more than {} read; an input may hold at most that", path, units_text(kMaxInputBytes)));
    text.append(buf, static_cast<std::size_t>(n));
  }
  return text;
}

}  // namespace parmsim
