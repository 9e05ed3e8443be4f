// Inputs and outputs that must be refused (issue "Hardening", classes 3, 4
// and 8): outputs that would damage files, resuming a sweep across changed
// inputs or beside a running sweep, YAML/JSON that is quietly misread.
// Every case checks the error names the path or key, and that no file was
// created or changed.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "cli/common.hpp"
#include "sim/core/error.hpp"
#include "sim/core/utf8.hpp"
#include "sim/engine/simulator.hpp"
#include "cli/measured_trace.hpp"
#include "sim/engine/trace_writer.hpp"
#include "sim/io/csv.hpp"
#include "sim/graph/graph_io.hpp"
#include "sim/io/output.hpp"
#include "sim/io/yaml_reader.hpp"
#include "sim/moe/model.hpp"
#include "sim/sweep/runner.hpp"
#include "sim/sweep/sweep_spec.hpp"
#include "sim/topo/topology_io.hpp"

namespace fs = std::filesystem;
using namespace parmsim;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "parmsim-h13-XXXXXX").string();
    REQUIRE(::mkdtemp(t.data()) != nullptr);
    path = t;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
  // Every entry of the folder, sorted (to see that nothing appeared).
  std::set<std::string> entries() const {
    std::set<std::string> s;
    for (const auto& e : fs::directory_iterator(path)) s.insert(e.path().filename().string());
    return s;
  }
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void spit(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The message of the UserError `f` throws ("" when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

auto write_text(const std::string& text) {
  return [text](std::ostream& os) { os << text; };
}

}  // namespace

// ---- Class 3: outputs that damage files ------------------------------------

TEST_CASE("write_atomically refuses a symbolic link and leaves it and its target alone", "[hardening][output]") {
  TempDir d;
  spit(d / "target.txt", "keep me\n");
  REQUIRE(::symlink("target.txt", (d / "link.csv").c_str()) == 0);
  const auto before = d.entries();
  const std::string msg = error_of([&] { write_atomically(d / "link.csv", write_text("new\n")); });
  CHECK_THAT(msg, Catch::Contains(d / "link.csv") && Catch::Contains("symbolic link"));
  CHECK(fs::is_symlink(d / "link.csv"));
  CHECK(fs::read_symlink(d / "link.csv") == "target.txt");
  CHECK(slurp(d / "target.txt") == "keep me\n");
  CHECK(d.entries() == before);  // no temporary left
}

TEST_CASE("write_atomically refuses a directory, a FIFO and a device", "[hardening][output]") {
  TempDir d;
  fs::create_directory(d / "dir.csv");
  REQUIRE(::mkfifo((d / "fifo.csv").c_str(), 0644) == 0);
  std::vector<std::pair<std::string, std::string>> cases = {{d / "dir.csv", "a directory"},
                                                             {d / "fifo.csv", "a FIFO"}};
  // A character device (as /dev/null, 1:3) where we may make one: as root the
  // old code replaced /dev/full.
  if (::mknod((d / "null.csv").c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0)
    cases.push_back({d / "null.csv", "a character device"});
  const auto before = d.entries();
  for (const auto& [path, kind] : cases) {
    INFO(path);
    const std::string msg = error_of([&] { write_atomically(path, write_text("x\n")); });
    CHECK_THAT(msg, Catch::Contains(path) && Catch::Contains(kind));
  }
  CHECK(fs::is_directory(d / "dir.csv"));
  CHECK(fs::is_empty(d / "dir.csv"));
  CHECK(fs::is_fifo(d / "fifo.csv"));
  if (cases.size() == 3) CHECK(fs::is_character_file(d / "null.csv"));
  CHECK(d.entries() == before);
}

TEST_CASE("an output's missing folders are made when it is written, not when checked; a file as its folder is refused",
          "[hardening][output]") {
  TempDir d;
  // The check accepts the path and makes nothing; the write makes the folders.
  CHECK_NOTHROW(check_output_path("--output", d / "no/such/x.csv"));
  CHECK(d.entries().empty());
  write_atomically(d / "no/such/x.csv", [](std::ostream& os) { os << "x\n"; });
  CHECK(slurp(d / "no/such/x.csv") == "x\n");
  // A write that fails leaves none of the folders it made, and no temporary.
  CHECK_THROWS_AS(write_atomically(d / "gone/a/x.csv", [](std::ostream&) { throw UserError("fill failed"); }), UserError);
  CHECK(!fs::exists(d / "gone"));
  {
    OutputBatch batch;  // staged, never committed: its folders go with its files
    write_atomically(d / "staged/b/x.csv", [](std::ostream& os) { os << "x\n"; });
    CHECK(fs::is_directory(d / "staged/b"));
  }
  CHECK(!fs::exists(d / "staged"));
  CHECK(d.entries() == std::set<std::string>{"no"});
  // A folder on the way that is a file: refused, naming it.
  spit(d / "file", "keep\n");
  const std::string msg = error_of([&] { check_output_path("--output", d / "file/sub/x.csv"); });
  CHECK_THAT(msg, Catch::StartsWith("--output: '" + (d / "file/sub/x.csv") + "'") &&
                      Catch::Contains("'" + (d / "file") + "' is not a directory"));
  CHECK_THAT(error_of([&] { check_output_path("--csv", d / "newdir/"); }), Catch::Contains("names a directory"));
  CHECK(d.entries() == (std::set<std::string>{"file", "no"}));
}

TEST_CASE("an output that is one of the inputs is refused, by path or by inode", "[hardening][output]") {
  TempDir d;
  spit(d / "spec.yaml", "name: x\n");
  REQUIRE(::link((d / "spec.yaml").c_str(), (d / "hard.yaml").c_str()) == 0);
  const std::vector<NamedPath> inputs = {{"the sweep spec", d / "spec.yaml"}};
  // The same path, another spelling of it (./ and ..), and a hard link.
  for (const std::string& out : {d / "spec.yaml", d.path + "/./spec.yaml", d / "../" + fs::path(d.path).filename().string() + "/spec.yaml", d / "hard.yaml"}) {
    INFO(out);
    const std::string msg = error_of([&] { check_outputs({{"--output", out}}, inputs); });
    CHECK_THAT(msg, Catch::StartsWith("--output: '" + out + "'") && Catch::Contains("the sweep spec") &&
                        Catch::Contains("input"));
  }
  // Relative "x" and "./x" from inside the folder.
  const auto cwd = fs::current_path();
  fs::current_path(d.path);
  CHECK_THAT(error_of([&] { check_outputs({{"-o", "./spec.yaml"}}, {{"the sweep spec", "spec.yaml"}}); }),
             Catch::Contains("-o: './spec.yaml' is the sweep spec ('spec.yaml')"));
  fs::current_path(cwd);
  CHECK(slurp(d / "spec.yaml") == "name: x\n");
}

TEST_CASE("two outputs of one command naming the same file are refused", "[hardening][output]") {
  TempDir d;
  CHECK_THAT(error_of([&] { check_outputs({{"--trace", d / "a.csv"}, {"--csv", d.path + "/./a.csv"}}, {}); }),
             Catch::Contains("--csv") && Catch::Contains("is also the --trace output"));
  OutputBatch b;
  write_atomically(d / "a.csv", write_text("1\n"));
  CHECK_THAT(error_of([&] { write_atomically(d / "a.csv", write_text("2\n")); }), Catch::Contains("written twice"));
}

TEST_CASE("write_atomically refuses to replace a file the process read as input", "[hardening][output]") {
  TempDir d;
  const std::string topo = slurp(std::string(PARMSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml");
  spit(d / "topo.yaml", topo);
  load_topology(d / "topo.yaml", {});  // notes it as an input
  const std::string msg = error_of([&] { write_atomically(d / "topo.yaml", write_text("gone\n")); });
  CHECK_THAT(msg, Catch::Contains(d / "topo.yaml") && Catch::Contains("reads as input"));
  CHECK(slurp(d / "topo.yaml") == topo);
  CHECK(d.entries() == std::set<std::string>{"topo.yaml"});
}

TEST_CASE("replacing a regular file keeps its permissions", "[hardening][output]") {
  TempDir d;
  spit(d / "out.csv", "old\n");
  ::chmod((d / "out.csv").c_str(), 0640);
  write_atomically(d / "out.csv", write_text("new\n"));
  CHECK(slurp(d / "out.csv") == "new\n");
  struct stat st {};
  REQUIRE(::stat((d / "out.csv").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0640);
}

TEST_CASE("an output batch puts all its files in place, or none", "[hardening][output]") {
  TempDir d;
  SECTION("committed: all appear") {
    OutputBatch b;
    write_atomically(d / "a.json", write_text("{}\n"));
    write_atomically(d / "b.csv", write_text("x\n"));
    CHECK(!fs::exists(d / "a.json"));  // not before the commit
    b.commit();
    CHECK(slurp(d / "a.json") == "{}\n");
    CHECK(slurp(d / "b.csv") == "x\n");
    CHECK(d.entries() == std::set<std::string>{"a.json", "b.csv"});
  }
  SECTION("a failure in the second file: neither appears, no temporary stays") {
    spit(d / "a.json", "old\n");
    {
      OutputBatch b;
      write_atomically(d / "a.json", write_text("{}\n"));
      CHECK_THROWS_AS(write_atomically(d / "b.csv", [](std::ostream&) { throw UserError("failed"); }), UserError);
    }
    CHECK(slurp(d / "a.json") == "old\n");
    CHECK(d.entries() == std::set<std::string>{"a.json"});
  }
  SECTION("a target that became a directory before the commit: nothing of the batch stays") {
    {
      OutputBatch b;
      write_atomically(d / "a.json", write_text("{}\n"));
      write_atomically(d / "b.csv", write_text("x\n"));
      fs::create_directory(d / "b.csv");
      CHECK_THROWS_AS(b.commit(), UserError);
    }
    CHECK(d.entries() == std::set<std::string>{"b.csv"});
    CHECK(fs::is_empty(d / "b.csv"));
  }
}

// ---- Class 8: YAML and JSON read quietly wrong -----------------------------

TEST_CASE("a repeated key is refused with file:line:col and the key path", "[hardening][yaml]") {
  struct Case {
    std::string text, where, key;
  };
  const std::vector<Case> cases = {
      {"a: 1\nb: 2\na: 3\n", "f.yaml:3:1", "'a' (first at line 1)"},
      {"x:\n  y: 1\n  z: 2\n  y: 3\n", "f.yaml:4:3", "'x.y' (first at line 2)"},
      {"l:\n  - {a: 1, b: 2}\n  - {a: 1, a: 2}\n", "f.yaml:3:12", "'l[1].a'"},
      {"\"a\": 1\n'a': 2\n", "f.yaml:2:1", "'a'"},  // quoting does not make another key
  };
  for (const Case& c : cases) {
    INFO(c.text);
    const std::string msg = error_of([&] { YamlReader::load_string(c.text, "f.yaml"); });
    CHECK_THAT(msg, Catch::StartsWith(c.where) && Catch::Contains("duplicate key " + c.key));
  }
  // Aliases share a mapping; that is not a repetition.
  CHECK_NOTHROW(YamlReader::load_string("a: &x {k: 1}\nb: *x\nc: *x\n", "f.yaml"));
}

TEST_CASE("many aliases of aliases are checked in linear time", "[hardening][yaml]") {
  // 2^30 paths through 30 levels of aliases; walked naively this never ends.
  // The event scan sizes each anchor once: level i expands to 2^(i+2) - 1 nodes
  // and the levels so far to about 2^(i+3), past 2^22 at level 20 (line 21):
  // refused there, without walking any path.
  std::string t = "l0: &l0 [1, 2]\n";
  for (int i = 1; i <= 30; ++i) t += fmt::format("l{}: &l{} [*l{}, *l{}]\n", i, i, i - 1, i - 1);
  CHECK_THROWS_WITH(YamlReader::load_string(t, "laughs.yaml"),
                    Catch::StartsWith("laughs.yaml:") && Catch::Contains("aliases expand the document past"));
  CHECK_THROWS_WITH(YamlReader::load_string(t, "laughs.yaml"), Catch::StartsWith("laughs.yaml:21:"));
  // Levels 0 to 18 (about 2^21 nodes) are within the bound, and load.
  const std::string fewer = t.substr(0, t.find("l19:"));
  CHECK(YamlReader::load_string(fewer, "fewer.yaml").at("l18").size() == 2);
}

TEST_CASE("a second YAML document is refused rather than ignored", "[hardening][yaml]") {
  const std::string msg = error_of([] { YamlReader::load_string("a: 1\n---\nb: 2\n", "two.yaml"); });
  CHECK_THAT(msg, Catch::StartsWith("two.yaml:3:1") && Catch::Contains("second YAML document"));
  CHECK_NOTHROW(YamlReader::load_string("a: 1\n---\n", "end.yaml"));  // an empty trailing document is nothing
}

TEST_CASE("JSON files are JSON: trailing commas are refused with line:col", "[hardening][json]") {
  struct Case {
    std::string text, where;
  };
  const std::vector<Case> cases = {
      {"{\"a\": 1,}", "g.json:1:9"},
      {"{\n  \"a\": [1, 2,]\n}\n", "g.json:2:14"},
      {"{\"a\": 1}\n{\"b\": 2}\n", "g.json:2:1"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    CHECK_THAT(error_of([&] { YamlReader::load_string(c.text, "g.json"); }),
               Catch::StartsWith(c.where) && Catch::Contains("malformed JSON"));
  }
  CHECK_THAT(error_of([] { YamlReader::load_string("{\"a\": 1, \"a\": 2}", "g.json"); }),
             Catch::StartsWith("g.json:1:10") && Catch::Contains("duplicate key 'a'"));
  CHECK_NOTHROW(YamlReader::load_string("{\"a\": [1, 2], \"b\": {\"c\": null}}", "g.json"));
}

TEST_CASE("every loader goes through the same checks: topology and task graph files", "[hardening][yaml]") {
  TempDir d;
  std::string topo = slurp(std::string(PARMSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml");
  // Repeat the first top-level key at the end: yaml-cpp alone would keep the first.
  std::istringstream lines(topo);
  std::string line, key;
  int n = 0, key_line = 0;
  while (std::getline(lines, line)) {
    ++n;
    if (key.empty() && !line.empty() && line[0] != '#' && line[0] != ' ' && line.find(':') != std::string::npos)
      key = line.substr(0, line.find(':')), key_line = n;
  }
  REQUIRE(!key.empty());
  spit(d / "t.yaml", topo + key + ": again\n");
  CHECK_THAT(error_of([&] { load_topology(d / "t.yaml", {}); }),
             Catch::Contains(d / "t.yaml") && Catch::Contains("duplicate key '" + key + "' (first at line " +
                                                                std::to_string(key_line) + ")"));
  const std::string graph = slurp(std::string(PARMSIM_SOURCE_DIR) + "/tests/data/graph.json");
  const auto close = graph.rfind('}');
  REQUIRE(close != std::string::npos);
  spit(d / "g.json", graph.substr(0, graph.find_last_not_of(" \n", close - 1) + 1) + ",\n}\n");
  CHECK_THAT(error_of([&] { load_task_graph(d / "g.json"); }),
             Catch::Contains(d / "g.json") && Catch::Contains("malformed JSON"));
}

// ---- Class 4: resuming a sweep across changed inputs -----------------------

namespace {

// A copy of tests/data/small-sweep.yaml and its topologies in `d`.
std::string make_sweep(const TempDir& d) {
  const std::string src = PARMSIM_SOURCE_DIR;
  spit(d / "pcie.yaml", slurp(src + "/topologies/pcie-8gpu.yaml"));
  spit(d / "cluster.yaml", slurp(src + "/topologies/parm-32gpu.yaml"));
  spit(d / "spec.yaml",
       "name: small\nnetwork: flow\ntopologies:\n  - {file: pcie.yaml}\n  - {file: cluster.yaml}\n"
       "grid:\n  B: [2, 4]\n  L: [256]\n  M: [512]\n  H: [1024]\n  mp: [2, 4]\n  experts_per_gpu: [1]\n");
  return d / "spec.yaml";
}

sweep::RunOptions quiet(const std::string& out, bool resume = false) {
  sweep::RunOptions o;
  o.out = out;
  o.threads = 1;
  o.progress = false;
  o.resume = resume;
  return o;
}

// Runs the sweep with the file size limited to `bytes`: writes past it fail
// (EFBIG) as a full disk would, partway through the partial file.
std::string run_cut_short(const sweep::Spec& spec, const std::string& out, rlim_t bytes) {
  struct rlimit old {};
  ::getrlimit(RLIMIT_FSIZE, &old);
  auto* prev = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit lim = old;
  lim.rlim_cur = bytes;
  ::setrlimit(RLIMIT_FSIZE, &lim);
  const std::string msg = error_of([&] { sweep::run_sweep(spec, quiet(out)); });
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, prev);
  return msg;
}

}  // namespace

TEST_CASE("sweep refuses its own spec, a topology or a directory as output, before running", "[hardening][sweep]") {
  TempDir d;
  const std::string spec_file = make_sweep(d);
  const sweep::Spec spec = sweep::load_spec(spec_file);
  fs::create_directory(d / "dir.csv");
  const std::string spec_text = slurp(spec_file), topo_text = slurp(d / "pcie.yaml");
  const auto before = d.entries();
  struct Case {
    std::string out, says;
  };
  for (const Case& c : std::vector<Case>{{spec_file, "is the sweep spec"},
                                         {d.path + "/./pcie.yaml", "is the topology file"},
                                         {d / "dir.csv", "is a directory"}}) {
    INFO(c.out);
    const std::string msg = error_of([&] { sweep::run_sweep(spec, quiet(c.out)); });
    CHECK_THAT(msg, Catch::StartsWith("--output: '" + c.out + "'") && Catch::Contains(c.says));
  }
  // The partial file and the run.json are outputs too.
  REQUIRE(::symlink("elsewhere", (d / "r.csv.partial").c_str()) == 0);
  CHECK_THAT(error_of([&] { sweep::run_sweep(spec, quiet(d / "r.csv")); }),
             Catch::Contains("'" + (d / "r.csv.partial") + "' is a symbolic link"));
  ::unlink((d / "r.csv.partial").c_str());
  CHECK(slurp(spec_file) == spec_text);
  CHECK(slurp(d / "pcie.yaml") == topo_text);
  CHECK(d.entries() == before);
}

TEST_CASE("a second sweep on the same output is refused while the first holds it", "[hardening][sweep]") {
  TempDir d;
  const sweep::Spec spec = sweep::load_spec(make_sweep(d));
  spit(d / "r.csv.partial", "rows of the running sweep\n");
  // The running sweep: its lock on the partial file (flock, as run_sweep takes it).
  const int fd = ::open((d / "r.csv.partial").c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);
  for (bool resume : {false, true}) {
    const std::string msg = error_of([&] { sweep::run_sweep(spec, quiet(d / "r.csv", resume)); });
    CHECK_THAT(msg, Catch::Contains(d / "r.csv") && Catch::Contains("another sweep"));
  }
  CHECK(slurp(d / "r.csv.partial") == "rows of the running sweep\n");
  CHECK(d.entries() == std::set<std::string>{"cluster.yaml", "pcie.yaml", "r.csv.partial", "spec.yaml"});
  ::close(fd);  // the first sweep ends (or dies): the lock goes with it
}

TEST_CASE("sweep resume refuses a partial file whose inputs changed, naming the file", "[hardening][sweep]") {
  TempDir d;
  const std::string spec_file = make_sweep(d);
  const sweep::Spec spec = sweep::load_spec(spec_file);
  sweep::run_sweep(spec, quiet(d / "full.csv"));
  const std::string full = slurp(d / "full.csv");
  REQUIRE(std::count(full.begin(), full.end(), '\n') == 25);

  // Interrupted after a few configurations (the file system refused more).
  const std::string cut = run_cut_short(spec, d / "r.csv", 3000);
  CHECK_THAT(cut, Catch::Contains("r.csv.partial") && Catch::Contains("--resume continues"));
  CHECK(!fs::exists(d / "r.csv"));
  CHECK(!fs::exists(d / "r.csv.run.json"));
  const std::string partial = slurp(d / "r.csv.partial");
  REQUIRE(partial.rfind("#parmsim-sweep-partial ", 0) == 0);

  struct Change {
    std::string file, role;
  };
  for (const Change& c : std::vector<Change>{{d / "cluster.yaml", "topology"}, {spec_file, "sweep spec"}}) {
    INFO(c.file);
    const std::string orig = slurp(c.file);
    spit(c.file, orig + "# edited\n");
    const sweep::Spec now = sweep::load_spec(spec_file);
    const std::string msg = error_of([&] { sweep::run_sweep(now, quiet(d / "r.csv", true)); });
    CHECK_THAT(msg, Catch::Contains(c.role + " '" + c.file + "' changed since the interrupted run"));
    CHECK(slurp(d / "r.csv.partial") == partial);
    CHECK(!fs::exists(d / "r.csv"));
    spit(c.file, orig);
  }
  // A calibration file the interrupted run did not use.
  {
    const std::string cal = d / "cal.yaml";
    spit(cal, "collectives:\n  - {op: allreduce, ranks: 8, hosts: 1, link: intra, alpha: 10us, bandwidth: 100GBps}\n");
    const sweep::Spec now = sweep::load_spec(spec_file, cal);
    CHECK_THAT(error_of([&] { sweep::run_sweep(now, quiet(d / "r.csv", true)); }),
               Catch::Contains("did not read calibration '" + cal + "'"));
    CHECK(slurp(d / "r.csv.partial") == partial);
  }
  // Unchanged inputs: resumes, and the result is the full run's.
  const sweep::RunSummary s = sweep::run_sweep(spec, quiet(d / "r.csv", true));
  CHECK(s.configs_resumed > 0);
  CHECK(s.configs_resumed + s.configs_run == 8);
  CHECK(slurp(d / "r.csv") == full);
  CHECK(!fs::exists(d / "r.csv.partial"));
  CHECK(fs::exists(d / "r.csv.run.json"));
}

TEST_CASE("a partial file without the record of its inputs is refused on --resume", "[hardening][sweep]") {
  TempDir d;
  const sweep::Spec spec = sweep::load_spec(make_sweep(d));
  // What an older parmsim wrote: the CSV header and rows, no record.
  const std::string old = sweep::csv_header() + "0,pcie-8gpu,8,2,256\n";
  spit(d / "r.csv.partial", old);
  CHECK_THAT(error_of([&] { sweep::run_sweep(spec, quiet(d / "r.csv", true)); }),
             Catch::Contains(d / "r.csv.partial") && Catch::Contains("recording the inputs"));
  CHECK(slurp(d / "r.csv.partial") == old);
  CHECK(!fs::exists(d / "r.csv"));
}

TEST_CASE("a sweep that fails before a configuration is complete leaves nothing behind", "[hardening][sweep]") {
  TempDir d;
  const sweep::Spec spec = sweep::load_spec(make_sweep(d));
  const auto before = d.entries();
  // Room for the partial file's first lines only.
  const std::string msg = run_cut_short(spec, d / "r.csv", 700);
  CHECK_THAT(msg, Catch::Contains("r.csv.partial") && Catch::Contains("write failed"));
  CHECK(d.entries() == before);
}

// ---- Classes 5, 6 and 8 at the library: products, and keys that would be ignored ----

TEST_CASE("a task that depends on itself is named as such, at its file:line", "[hardening][graph]") {
  const std::string text =
      "ranks: 1\ntasks:\n  - {name: a, rank: 0, op: gemm, flops: 1}\n  - {name: b, rank: 0, op: gemm, flops: 1, "
      "deps: [b]}\n";
  const std::string msg = error_of([&] { parse_task_graph_text(text, "g.yaml"); });
  CHECK_THAT(msg, Catch::StartsWith("g.yaml:4:") && Catch::Contains("tasks[1].deps[0]") &&
                      Catch::Contains("task 'b' depends on itself"));
  // The builder, without a file, says the same (it used to say "task id 1 does not exist").
  TaskGraphBuilder b(1);
  b.add_stream_all("main");
  Task t;
  t.name = "x";
  const int id = b.add_task(t);
  b.add_dep(id, id);
  CHECK_THAT(error_of([&] { std::move(b).build(); }), Catch::Contains("task 'x' depends on itself"));
}

TEST_CASE("window and inner are refused where the collective would ignore them", "[hardening][graph]") {
  // Paced: direct on every op it runs, p2p and auto (= p2p) AlltoAlls, hierarchical AlltoAll.
  CHECK(window_unused(CollOp::allreduce, "direct").empty());
  CHECK(window_unused(CollOp::alltoall, "").empty());
  CHECK(window_unused(CollOp::alltoallv, "auto").empty());
  CHECK(window_unused(CollOp::alltoall, "hierarchical").empty());
  // Not paced: NCCL's algorithms, pairwise (a window of 1 by definition), SAA, sendrecv.
  CHECK_THAT(window_unused(CollOp::allreduce, ""), Catch::Contains("not auto allreduce"));
  CHECK(!window_unused(CollOp::allreduce, "ring").empty());
  CHECK(!window_unused(CollOp::alltoall, "pairwise").empty());
  CHECK(!window_unused(CollOp::allgather, "hierarchical").empty());
  CHECK(!window_unused(CollOp::saa, "released").empty());
  CHECK(!window_unused(CollOp::sendrecv, "p2p").empty());
  const std::string head = "ranks: 2\ncollectives: [{name: c, op: allreduce, group: [0, 1], bytes: 1MiB, ";
  const std::string tail = "}]\ntasks: [{name: a, rank: 0, collective: c}, {name: b, rank: 1, collective: c}]\n";
  CHECK_THAT(error_of([&] { parse_task_graph_text(head + "inner: 2" + tail, "g.yaml"); }),
             Catch::StartsWith("g.yaml:2:") && Catch::Contains("collectives[0].inner") && Catch::Contains("only saa"));
  CHECK_THAT(error_of([&] { parse_task_graph_text(head + "window: 1" + tail, "g.yaml"); }),
             Catch::StartsWith("g.yaml:2:") && Catch::Contains("collectives[0].window"));
  CHECK(error_of([&] { parse_task_graph_text(head + "algo: direct, window: 1" + tail, "g.yaml"); }).empty());
}

TEST_CASE("a fabric key its kind does not read is refused, and topology sizes are bounded", "[hardening][topology]") {
  const std::string src = slurp(std::string(PARMSIM_SOURCE_DIR) + "/topologies/parm-32gpu.yaml");
  REQUIRE(src.find("  kind: switch\n") != std::string::npos);
  std::string t = src;
  t.replace(t.find("  kind: switch\n"), 15, "  kind: switch\n  oversubscription: 2\n");
  CHECK_THAT(error_of([&] { parse_topology_text(t, "t.yaml"); }),
             Catch::StartsWith("t.yaml:") && Catch::Contains("fabric.oversubscription") &&
                 Catch::Contains("kind switch"));
  // 2^20 nodes of 4 GPUs: 2^22 GPUs, above the bound of 2^20 (the int ranks would not wrap, but memory would run out).
  CHECK_THAT(error_of([&] { parse_topology_text(src, "t.yaml", {"nodes=1048576"}); }),
             Catch::Contains("key 'nodes'") && Catch::Contains("nodes * node.gpus = 1048576 * 4 = 4194304"));
}

TEST_CASE("a model spec's E is the one it runs, and E beside experts_per_gpu is refused", "[hardening][model]") {
  TempDir d;
  const std::string src = std::string(PARMSIM_SOURCE_DIR);
  std::string spec = slurp(src + "/experiments/bert-moe.yaml");
  const auto at = spec.find("topology: ../topologies/");
  REQUIRE(at != std::string::npos);
  spec.replace(at, 24, "topology: " + src + "/topologies/");
  spit(d / "m.yaml", spec);
  const moe::ModelSpec m = moe::load_model_spec(d / "m.yaml");
  // experts_per_gpu 1 on parm-32gpu (8 nodes x 4 GPUs) and on one node of it.
  CHECK(moe::model_layer(m, load_topology(m.topology_file, {})).E == 32);
  CHECK(moe::model_layer(m, load_topology(m.topology_file, {"nodes=1"})).E == 4);
  const auto e = spec.find("experts_per_gpu: 1\n");
  REQUIRE(e != std::string::npos);
  spit(d / "both.yaml", spec.substr(0, e) + "E: 64\n" + spec.substr(e));
  CHECK_THAT(error_of([&] { moe::load_model_spec(d / "both.yaml"); }),
             Catch::Contains("both.yaml:") && Catch::Contains("key 'experts_per_gpu'"));
}

// Input misread (hardening, second round, class I): a key given twice in one
// key=value list is refused, naming both; a whole number is written as one.
TEST_CASE("a key given twice in --set or --topo-set is refused, naming both", "[hardening]") {
  CHECK(cli::split_assignments("B=2,L=4,,M=8", "--set") == std::vector<std::string>{"B=2", "L=4", "M=8"});
  CHECK_THROWS_WITH(cli::split_assignments("B=2,L=4,B=4", "--set"),
                    "--set: key 'B' is given twice (B=2 and B=4); give each key once");
  CHECK_THROWS_WITH(cli::split_assignments("nodes=2,fabric.bandwidth=1Gbps,nodes=1", "--topo-set"),
                    Catch::Contains("--topo-set: key 'nodes' is given twice (nodes=2 and nodes=1)"));
  // Different keys with a common prefix are different keys.
  CHECK(cli::split_assignments("link_efficiency.nvlink=1,link_efficiency.pcie=1", "--topo-set").size() == 2);
}

TEST_CASE("experts_per_gpu in a sweep grid is a whole number, counted or run", "[hardening][sweep]") {
  const std::string where = std::string(PARMSIM_SOURCE_DIR) + "/experiments/t.yaml";
  for (const char* bad : {"1.5", "2abc", "0", "-1", "1e3"}) {
    CAPTURE(bad);
    const std::string text = fmt::format(
        "name: t\ntopologies: [{{file: ../topologies/parm-32gpu.yaml}}]\ngrid: {{B: [1], experts_per_gpu: [{}]}}\n",
        bad);
    sweep::LoadOptions count;
    count.count_only = true;
    CHECK_THROWS_WITH(sweep::parse_spec_text(text, where, "", count),
                      Catch::Contains("experts_per_gpu") && Catch::Contains(fmt::format("got '{}'", bad)));
    CHECK_THROWS_WITH(sweep::parse_spec_text(text, where), Catch::Contains(fmt::format("got '{}'", bad)));
  }
  // 2 experts per GPU on 32 GPUs: E = 64 (the grid's only configuration).
  const sweep::Spec s = sweep::parse_spec_text(
      "name: t\ntopologies: [{file: ../topologies/parm-32gpu.yaml}]\ngrid: {B: [1], experts_per_gpu: [2]}\n", where);
  REQUIRE(s.configs.size() == 1);
  CHECK(s.configs[0].layer.E == 64);
}

// Uncaught exceptions (class F, in part): a list index past what a long holds
// in an override is the same one-line refusal as any index past the list.
TEST_CASE("a huge list index in a topology override is refused in one line", "[hardening]") {
  const std::string t = std::string(PARMSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml";
  for (const char* idx : {"99", "99999999999999999999999999"}) {
    CAPTURE(idx);
    try {
      load_topology(t, {fmt::format("node.links.{}.bandwidth=1GBps", idx)});
      FAIL("accepted");
    } catch (const UserError& e) {
      CHECK_THAT(e.what(), Catch::Contains("entries"));
    }
  }
}

// Messages name their option (class K, in part), and sizes are whole (class I):
// a size list names the option it came from, not always --bytes.
TEST_CASE("a bad size names its option", "[hardening]") {
  CHECK_THROWS_WITH(cli::parse_sizes("nanB", "--hold-out"), Catch::StartsWith("--hold-out: expected"));
  CHECK_THROWS_WITH(cli::parse_sizes("1MiB:1.5B", "--bytes"),
                    Catch::StartsWith("--bytes: expected a whole number of bytes"));
  CHECK(cli::parse_sizes("1KiB:4KiB", "--bytes") == std::vector<std::uint64_t>{1024, 2048, 4096});
}

// Damaged CSV (class G, in part): fields are written as RFC 4180 quotes them and
// read back by the one reader (split_csv).
TEST_CASE("CSV fields with commas or quotes are quoted and read back whole", "[hardening][csv]") {
  for (const std::string v : {"plain", "a,b", "say \"hi\"", "", "dgx-h100[nodes=1,link_efficiency.network=0.5]"}) {
    CAPTURE(v);
    CHECK(split_csv(csv_field(v) + "," + csv_field("x"), "t") == std::vector<std::string>{v, "x"});
  }
  CHECK(csv_field("plain") == "plain");      // names without commas are written as before
  CHECK(csv_field("a,b") == "\"a,b\"");
  CHECK(csv_field("q\"") == "\"q\"\"\"");
}

TEST_CASE("a sweep whose topology grid has two keys writes rows of the header's width", "[hardening][csv][sweep]") {
  const sweep::Spec s = sweep::parse_spec_text(
      "name: t\ntopologies: [{file: ../topologies/parm-32gpu.yaml, grid: {nodes: [8], link_efficiency.network: [0.5]}}]\n"
      "grid: {B: [1], L: [256], chunks: [1], split: [after_order], gather: [before_iorder]}\n",
      std::string(PARMSIM_SOURCE_DIR) + "/experiments/t.yaml");
  REQUIRE(s.configs.size() == 1);
  const auto header = split_csv(sweep::csv_header().substr(0, sweep::csv_header().size() - 1), "h");
  const std::size_t width = header.size();
  const std::size_t schedule_col =
      static_cast<std::size_t>(std::find(header.begin(), header.end(), "schedule") - header.begin());
  REQUIRE(schedule_col < width);
  const std::string rows = sweep::run_config(s, s.configs[0]);
  std::istringstream in(rows);
  int n = 0;
  for (std::string line; std::getline(in, line); ++n) {
    const auto f = split_csv(line, "row");
    CHECK(f.size() == width);
    CHECK(f[1] == "parm-32gpu[nodes=8,link_efficiency.network=0.5]");
    CHECK(f[schedule_col].find("[chunks=1;split=after_order;gather=before_iorder]") != std::string::npos);
  }
  CHECK(n == 3);
}

TEST_CASE("a trace CSV with a comma in a task name reads back", "[hardening][csv]") {
  const TaskGraph g = parse_task_graph_text(R"(ranks: 1
streams: ["comp,ute"]
tasks:
  - {name: "copy,1", rank: 0, op: copy, bytes: 1MiB}
  - {name: "say \"b\"", rank: 0, op: copy, bytes: 1MiB}
)",
                                            "t.yaml");
  const SimResult r = simulate(g, load_topology(std::string(PARMSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml"));
  std::ostringstream os;
  write_trace_csv(os, g, r);
  const cli::MeasuredRows m = cli::read_trace_rows(os.str(), "t.csv", g);
  CHECK(m.end[1] == Approx(r.trace[1].end.to_us()));
  CHECK(m.duration[0] == Approx((r.trace[0].end - r.trace[0].start).to_us()));
}

// Stack overflow (class A): an alias inside the node it names was walked
// without end (2.8 GB, then SIGSEGV, through an overlay); aliases of aliases
// expand exponentially. Every YAML loader scans the document's events first.
TEST_CASE("YAML aliases: a self-reference is refused at the alias, an exponential expansion past its bound",
          "[hardening][yaml]") {
  // The alias `*x` sits in the mapping `&x` opens: line 1, column 30 (1-based).
  CHECK_THROWS_WITH(YamlReader::load_string("link_efficiency: &x {nvlink: *x}\n", "o.yaml"),
                    Catch::StartsWith("o.yaml:1:30: an alias inside the node it names"));
  CHECK_THROWS_WITH(YamlReader::load_string("a: &x [1, [2, *x]]\n", "l.yaml"),
                    Catch::StartsWith("l.yaml:1:15: an alias inside the node it names"));
  CHECK_THROWS_WITH(YamlReader::load_string("a: &x\n  b:\n    c: *x\n", "n.yaml"),
                    Catch::StartsWith("n.yaml:3:8: an alias inside the node it names"));
  // 10 levels of 10 aliases of the level below: 10^10 nodes, refused once past 2^22.
  std::string lol = "a0: &a0 [1,1,1,1,1,1,1,1,1,1]\n";
  for (int i = 1; i < 10; ++i) {
    lol += fmt::format("a{}: &a{} [", i, i);
    for (int j = 0; j < 10; ++j) lol += fmt::format("{}*a{}", j ? "," : "", i - 1);
    lol += "]\n";
  }
  CHECK_THROWS_WITH(YamlReader::load_string(lol, "lol.yaml"), Catch::Contains("aliases expand the document past"));
  // Five levels (10^5 nodes) and an alias used after its node closed are fine.
  std::string five = lol.substr(0, lol.find("a5:"));
  CHECK(YamlReader::load_string(five, "five.yaml").at("a4").size() == 10);
  const YamlReader ok = YamlReader::load_string("a: &x {p: 1}\nb: *x\nc: [*x, *x]\n", "ok.yaml");
  CHECK(ok.at("b").at("p").as_int() == 1);
  // Through the loaders that walk the tree: an overlay, and a sweep spec's topology list.
  const std::string dir = std::string(PARMSIM_SOURCE_DIR);
  const auto tmp = std::filesystem::temp_directory_path() / "parmsim-alias-overlay.yaml";
  std::ofstream(tmp) << "link_efficiency: &x {nvlink: *x}\n";
  CHECK_THROWS_WITH(load_topology_overlay(tmp.string()), Catch::Contains("an alias inside the node it names"));
  std::filesystem::remove(tmp);
  CHECK_THROWS_WITH(
      sweep::parse_spec_text("name: s\ntopologies: &t [{file: x.yaml, set: *t}]\ngrid: {B: [1]}\n",
                             dir + "/experiments/t.yaml"),
      Catch::Contains("an alias inside the node it names"));
}

// Class F: names that are not UTF-8 made every JSON writer fail with an
// internal error. Every YAML and CSV input is now checked at load.
TEST_CASE("utf8_error finds the first byte that is not UTF-8", "[hardening][utf8]") {
  CHECK_FALSE(utf8_error("plain ascii"));
  CHECK_FALSE(utf8_error("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"));  // é € 😀
  CHECK(utf8_error("ab\xFF") == std::optional<std::size_t>(2));            // never a UTF-8 byte
  CHECK(utf8_error("a\xC0\x80") == std::optional<std::size_t>(1));         // overlong NUL
  CHECK(utf8_error("\xED\xA0\x80") == std::optional<std::size_t>(0));      // a surrogate, U+D800
  CHECK(utf8_error("x\xE2\x82") == std::optional<std::size_t>(1));         // cut short
  CHECK(utf8_error("\xF4\x90\x80\x80") == std::optional<std::size_t>(0));  // above U+10FFFF
  CHECK(utf8_error("\xC3\xA9\x80") == std::optional<std::size_t>(2));      // a stray continuation byte
}

TEST_CASE("a YAML or CSV input that is not UTF-8 is refused at the bad byte", "[hardening][utf8]") {
  using Catch::Matchers::Contains;
  // Line 2, column 9: "name: ab" is 8 bytes before the 0xFF.
  CHECK_THROWS_WITH(parse_topology_text("gpu: h100\nname: ab\xFF\n", "t.yaml"),
                    Contains("t.yaml:2:9: byte 0xFF is not UTF-8"));
  const std::string path = (std::filesystem::temp_directory_path() / "parmsim-utf8.csv").string();
  std::ofstream(path) << "gpu,dtype\nh100,bf\xC3\n";
  // Row 2: "h100,bf" is 7 bytes, the cut-short sequence starts at column 8.
  CHECK_THROWS_WITH(read_csv_table(path, {"gpu", "dtype"}, [](const CsvRow&) {}),
                    Contains(":2: column 8: byte 0xC3 is not UTF-8"));
  std::remove(path.c_str());
}
