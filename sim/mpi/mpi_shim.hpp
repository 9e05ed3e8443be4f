#pragma once
// The few MPI calls a sharded sweep (and the CUDA executor's NCCL mode) needs.
// The simulator library holds no MPI: a program that links MPI installs a
// Transport (the parmsim command does, cli/mpi_transport.cpp). MPI is
// initialised only when the process was started by mpirun (its environment
// says so), so a plain `parmsim sweep` never touches MPI. Without a transport
// these calls act as a single process.
#include <cstddef>
#include <string>
#include <vector>

namespace parmsim::mpi {

// MPI as the calls below use it; each is called only between init and finalize.
struct Transport {
  void (*init)(int* rank, int* size);
  void (*finalize)();
  void (*broadcast_bytes)(void* data, std::size_t n);
  std::vector<std::string> (*gather_strings)(const std::string& s);
  double (*allreduce_max)(double v);
  void (*barrier)();
};
// The transport the calls below use (null: none); kept, not copied.
void install(const Transport* t);

bool launched_by_mpirun();
void init(int* rank, int* size);  // no-op (rank 0 of 1) unless launched_by_mpirun()
void finalize();
std::size_t broadcast_size(std::size_t v);                      // rank 0's value to all
std::vector<std::string> gather_strings(const std::string& s);  // all ranks' strings on rank 0
bool available();                                               // a transport is installed
bool active();                                                  // init() started MPI
void world(int* rank, int* size);                               // rank 0 of 1 when not active
void broadcast_bytes(void* data, std::size_t n);                // rank 0's bytes to all
double allreduce_max(double v);                                 // the largest v over all ranks
void barrier();

}  // namespace parmsim::mpi
