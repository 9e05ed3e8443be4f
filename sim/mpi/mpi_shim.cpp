#include "sim/mpi/mpi_shim.hpp"

#include <cstdlib>

namespace parmsim::mpi {

namespace {
const Transport* g_transport = nullptr;
bool g_active = false;
int g_rank = 0, g_size = 1;
}  // namespace

void install(const Transport* t) {
  g_transport = t;
}

bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
}

bool available() {
  return g_transport != nullptr;
}

void init(int* rank, int* size) {
  *rank = 0;
  *size = 1;
  if (!g_transport || g_active || !launched_by_mpirun()) {
    if (g_active) *rank = g_rank, *size = g_size;
    return;
  }
  g_transport->init(&g_rank, &g_size);
  g_active = true;
  *rank = g_rank, *size = g_size;
}

void finalize() {
  if (g_active) g_transport->finalize();
  g_active = false;
  g_rank = 0, g_size = 1;
}

bool active() {
  return g_active;
}

void world(int* rank, int* size) {
  *rank = g_rank, *size = g_size;
}

void broadcast_bytes(void* data, std::size_t n) {
  if (g_active) g_transport->broadcast_bytes(data, n);
}

double allreduce_max(double v) {
  return g_active ? g_transport->allreduce_max(v) : v;
}

void barrier() {
  if (g_active) g_transport->barrier();
}

std::size_t broadcast_size(std::size_t v) {
  if (!g_active) return v;
  unsigned long long x = v;
  g_transport->broadcast_bytes(&x, sizeof x);
  return static_cast<std::size_t>(x);
}

std::vector<std::string> gather_strings(const std::string& s) {
  if (!g_active) return {s};
  return g_transport->gather_strings(s);
}

}  // namespace parmsim::mpi
