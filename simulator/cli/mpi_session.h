// MPI for the commands that share points among ranks (sweep, search): initialised for the
// command's life when the launcher started several ranks, finalised when it ends.
#pragma once

#ifdef SLUICE_HAVE_MPI
#include <mpi.h>
#endif

namespace sluice::cli {

struct MpiSession {
  int rank = 0, ranks = 1;
  bool on = false;
#ifdef SLUICE_HAVE_MPI
  // `launched`: launcher_ranks(); with more than one, MPI starts and rank and ranks are read.
  explicit MpiSession(int launched) {
    if (launched <= 1) return;
    MPI_Init(nullptr, nullptr);
    on = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  }
  ~MpiSession() {
    if (on) MPI_Finalize();
  }
#else
  explicit MpiSession(int) {}
#endif
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
};

}  // namespace sluice::cli
