#pragma once
// The input loaders as the fuzz targets drive them: each takes a file's bytes
// and loads them as that format. A UserError is the loader refusing bad input,
// as it should; anything else escaping (another exception, a crash, a
// sanitizer report, a timeout, running out of memory) is a finding.
// fuzz/target.cpp makes one libFuzzer target of each (scripts/fuzz.sh);
// tests/test_fuzz_corpus.cpp replays the committed corpora (fuzz/corpus/) through them.
#include <string>
#include <utility>
#include <vector>

namespace parmsim::fuzz {

using Loader = void (*)(const std::string& bytes);
// (target name, loader), in the order scripts/fuzz.sh runs them.
const std::vector<std::pair<std::string, Loader>>& loaders();
Loader loader(const std::string& name);  // throws std::out_of_range for an unknown name

}  // namespace parmsim::fuzz
