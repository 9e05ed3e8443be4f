#include "backend/cuda/cuda_backend.hpp"

#include <fmt/format.h>

#include "sim/core/error.hpp"

#ifdef PARMSIM_CUDA_MODULE
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#endif

namespace parmsim::exec {

namespace {

#ifdef PARMSIM_CUDA_MODULE
// The module, opened once per process and never closed (its code runs the
// executors' destructors).
struct Module {
  std::string error;  // why it did not load; empty when it did
  decltype(&parmsim_cuda_unavailable) unavailable = nullptr;
  decltype(&parmsim_cuda_make_executor) make = nullptr;
};

// Beside the program: the build directory holds both, as an installation would.
std::string module_path() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  std::string dir = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
  dir = dir.substr(0, dir.rfind('/') == std::string::npos ? 0 : dir.rfind('/') + 1);
  return dir + PARMSIM_CUDA_MODULE;
}

const Module& module() {
  static const Module m = [] {
    Module r;
    const std::string path = module_path();
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = dlerror();
      r.error = e ? e : path + ": cannot be opened";
      return r;
    }
    auto interface =
        reinterpret_cast<decltype(&parmsim_cuda_module_interface)>(dlsym(h, "parmsim_cuda_module_interface"));
    r.unavailable = reinterpret_cast<decltype(&parmsim_cuda_unavailable)>(dlsym(h, "parmsim_cuda_unavailable"));
    r.make = reinterpret_cast<decltype(&parmsim_cuda_make_executor)>(dlsym(h, "parmsim_cuda_make_executor"));
    if (!interface || !r.unavailable || !r.make)
      r.error = fmt::format("{} lacks the module's entry points", path);
    else if (interface() != kCudaModuleInterface)
      r.error = fmt::format("{} is from another build of parmsim (interface {}, this parmsim needs {})", path,
                            interface(), kCudaModuleInterface);
    return r;
  }();
  return m;
}
#endif

}  // namespace

std::string cuda_backend_unavailable() {
#ifdef PARMSIM_CUDA_MODULE
  const Module& m = module();
  if (!m.error.empty()) return "the CUDA backend is not available: " + m.error;
  std::string why;
  m.unavailable(&why);
  return why;
#else
  return "this parmsim was built without CUDA (nvcc was not found when it was configured)";
#endif
}

std::unique_ptr<GpuExecutor> make_cuda_executor(const CudaOptions& o) {
  if (const std::string why = cuda_backend_unavailable(); !why.empty()) throw UserError(why);
#ifdef PARMSIM_CUDA_MODULE
  return std::unique_ptr<GpuExecutor>(module().make(&o));
#else
  (void)o;  // unreachable: without the module cuda_backend_unavailable() says why
  return nullptr;
#endif
}

}  // namespace parmsim::exec
