//===- Launch.h - Launch the ranks of a job, and stop them cleanly -*- C++ -*-//

#ifndef STRATA_RUN_LAUNCH_H
#define STRATA_RUN_LAUNCH_H

#include "strata/Execution/Executable.h"

#include <cstdint>

namespace strata_run {

/// Runs this command again under mpirun with `nproc` ranks (without its
/// --nproc), relaying mpirun's stderr, and returns its exit code. Every
/// launch gets its own OpenMPI session directory.
int launchRanks(int argc, char **argv, int64_t nproc);

/// Installs the SIGTERM/SIGINT handlers of rank `rank` of a job: a rank the
/// job stops (a peer failed, Ctrl-C) names the collective, send, receive or
/// wait it was in, and exits.
void installStopHandlers(int rank);
/// Starts a thread that ends this rank (exit status 1, which makes mpirun end
/// the job) when it has waited in one MPI call for peer ranks (a rank that
/// stopped or hangs) longer than its communicator's wait limit, naming
/// where.
void watchCollectives();
/// The executable whose host calls the handlers name (null: none).
void watchExecutable(const strata::Executable *executable);
/// Communicator::onBegin / onEnd of the job's communicator.
void communicationBegins(const char *what);
void communicationEnds();
/// Names the long work of the start that this rank is doing without
/// communicating (null: none), which a rank the job stops reports at once.
void startupPhase(const char *what);
/// This rank is leaving on purpose, its failure reported (every rank met
/// it): a SIGTERM from here on (mpirun ending the job once a rank has
/// exited non-zero) ends it quietly with status 1, without a report that
/// a peer failed.
void leaving();

} // namespace strata_run

#endif // STRATA_RUN_LAUNCH_H
