// The MPI transport of sim/mpi/mpi_shim: the parmsim command installs it at
// start-up (the simulator library links no MPI). Without MPI at build time
// (-DPARMSIM_MPI=OFF) nothing is installed, and a command that would need it
// under mpirun (`sweep`, `--backend cuda`) is refused in one line.
#include <fmt/format.h>

#include "cli/common.hpp"
#include "sim/core/error.hpp"
#include "sim/mpi/mpi_shim.hpp"

#ifdef PARMSIM_HAVE_MPI
// The C API only: OpenMPI's deprecated C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace parmsim::cli {

#ifdef PARMSIM_HAVE_MPI
namespace {

void init(int* rank, int* size) {
  MPI_Init(nullptr, nullptr);
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
}

void finalize() {
  MPI_Finalize();
}

void broadcast_bytes(void* data, std::size_t n) {
  MPI_Bcast(data, static_cast<int>(n), MPI_BYTE, 0, MPI_COMM_WORLD);
}

double allreduce_max(double v) {
  double out = v;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

void barrier() {
  MPI_Barrier(MPI_COMM_WORLD);
}

std::vector<std::string> gather_strings(const std::string& s) {
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

const mpi::Transport kMpi = {init, finalize, broadcast_bytes, gather_strings, allreduce_max, barrier};

}  // namespace

void install_mpi() {
  mpi::install(&kMpi);
}
#else
void install_mpi() {}
#endif

void refuse_mpirun_without_mpi(const std::string& what) {
  if (mpi::launched_by_mpirun() && !mpi::available())
    throw UserError(
        fmt::format("{}: started by mpirun, but this parmsim was built without MPI "
                    "(configure with -DPARMSIM_MPI=ON)",
                    what));
}

}  // namespace parmsim::cli
