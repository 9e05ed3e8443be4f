#include "sim/sweep/mpi_shim.hpp"

#include <cstdlib>

#ifdef PARMSIM_HAVE_MPI
// The C API only: OpenMPI's deprecated C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace parmsim::sweep::mpi {

namespace {
bool g_active = false;
}

bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
}

#ifdef PARMSIM_HAVE_MPI
bool available() {
  return true;
}

void init(int* rank, int* size) {
  *rank = 0;
  *size = 1;
  if (!launched_by_mpirun()) return;
  MPI_Init(nullptr, nullptr);
  g_active = true;
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
}

void finalize() {
  if (g_active) MPI_Finalize();
  g_active = false;
}

bool active() {
  return g_active;
}

void world(int* rank, int* size) {
  *rank = 0, *size = 1;
  if (!g_active) return;
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
}

void broadcast_bytes(void* data, std::size_t n) {
  if (g_active) MPI_Bcast(data, static_cast<int>(n), MPI_BYTE, 0, MPI_COMM_WORLD);
}

double allreduce_max(double v) {
  if (!g_active) return v;
  double out = v;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

void barrier() {
  if (g_active) MPI_Barrier(MPI_COMM_WORLD);
}

std::size_t broadcast_size(std::size_t v) {
  if (!g_active) return v;
  unsigned long long x = v;
  MPI_Bcast(&x, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
  return static_cast<std::size_t>(x);
}

std::vector<std::string> gather_strings(const std::string& s) {
  if (!g_active) return {s};
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int len = static_cast<int>(s.size());
  std::vector<int> lens(size), displs(size);
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string all;
  if (rank == 0) {
    int total = 0;
    for (int i = 0; i < size; ++i) displs[i] = total, total += lens[i];
    all.resize(total);
  }
  MPI_Gatherv(s.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
  std::vector<std::string> out;
  if (rank == 0)
    for (int i = 0; i < size; ++i) out.push_back(all.substr(displs[i], lens[i]));
  return out;
}
#else
bool available() {
  return false;
}
void init(int* rank, int* size) {
  *rank = 0, *size = 1;
}
void finalize() {}
bool active() {
  return false;
}
void world(int* rank, int* size) {
  *rank = 0, *size = 1;
}
void broadcast_bytes(void*, std::size_t) {}
double allreduce_max(double v) {
  return v;
}
void barrier() {}
std::size_t broadcast_size(std::size_t v) {
  return v;
}
std::vector<std::string> gather_strings(const std::string& s) {
  return {s};
}
#endif

}  // namespace parmsim::sweep::mpi
