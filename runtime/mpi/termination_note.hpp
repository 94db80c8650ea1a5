// What a rank says when it is ended by SIGTERM, the signal mpirun (and Slurm's scancel) sends to
// the ranks still running once one rank has died: which operation it was waiting on and for how
// long, so that a killed rank's job ends with the op its peers were blocked on named next to
// mpirun's line naming the dead rank. The rank then dies of SIGTERM as it would have.
#pragma once

#include <string>

namespace wallfacer::runtime::detail {

// Installs the SIGTERM handler once per process, for MPI rank `rank`. A handler already there
// (not the default) is left alone.
void install_termination_note(int rank);
// The rank now waits on `what` (" [send to rank 2 tag 5 (32768 bytes)]"), since now.
void note_waiting(const std::string& what);
// The wait is over.
void note_not_waiting();

}  // namespace wallfacer::runtime::detail
