//===- MpiCommunicator.h - A job's communication over MPI -------*- C++ -*-===//
//
// The Communicator of a job whose ranks are the ranks of an MPI
// communicator: MPI_COMM_WORLD under mpirun, or the communicator a
// framework embedding Strata hands to the C API. Sub-communicators for the
// program's groups are created on first use; every rank reaches the
// collectives of the program in the same order, so they are created in the
// same order everywhere.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_EXECUTION_MPICOMMUNICATOR_H
#define STRATA_EXECUTION_MPICOMMUNICATOR_H

#include "strata/Execution/Communicator.h"

#include "llvm/Support/Error.h"

#include <functional>
#include <map>
#include <memory>
#include <mpi.h>
#include <vector>

namespace strata {

class MpiCommunicator : public Communicator {
public:
  /// The ranks of `comm` (MPI must be initialised; `comm` must outlive this).
  explicit MpiCommunicator(MPI_Comm comm);
  ~MpiCommunicator() override;

  int64_t rank() const override { return myRank; }

  /// Starts, the first time it is called in the process, a thread that ends
  /// the process (exit status 1) once it has been blocked in one MPI call
  /// that waits for peer ranks (a Waiting mark) for longer than that call's
  /// wait limit (setWaitLimit of its communicator; a call without one is
  /// not watched): MPI cannot cancel the call, and a peer that stopped or
  /// hangs would keep it waiting for ever. `report`, given the seconds
  /// waited, says so first (from that thread); later calls keep the first
  /// report.
  static void watchBlockedCalls(std::function<void(double waited)> report);
  /// Whether `seconds` is a limit setWaitLimit takes: from 0 (0: wait for
  /// ever, no watch) to 1e9. NaN is not.
  static bool validWaitLimit(double seconds) {
    return seconds >= 0 && seconds <= 1e9;
  }
  /// How long one of this communicator's calls may wait for peer ranks
  /// under watchBlockedCalls (0, the default: for ever); each communicator
  /// has its own (strata-run --collective-timeout, an executable's
  /// collectiveTimeout in the C API).
  void setWaitLimit(double seconds) { waitLimit = seconds; }
  double getWaitLimit() const { return waitLimit; }
  /// Marks an MPI call that may wait for peer ranks for as long as it
  /// lives, with the seconds it may wait (0: for ever), for the watch (the
  /// outermost of nested ones): the communicator's own calls, and a
  /// caller's on the same ranks. The mark is the process's: calls that wait
  /// for peers are made from one thread at a time (as MPI's default thread
  /// level asks).
  class Waiting {
    int64_t outer;
    double outerLimit;

  public:
    explicit Waiting(double limit);
    ~Waiting();
    Waiting(const Waiting &) = delete;
    Waiting &operator=(const Waiting &) = delete;
  };
  int64_t size() const override { return worldSize; }

  llvm::Error allReduceSum(std::vector<double> &data,
                           llvm::ArrayRef<int64_t> group) override;
  llvm::Error broadcast(std::vector<double> &data,
                        llvm::ArrayRef<int64_t> group, int64_t root) override;
  llvm::Error send(const std::vector<double> &data,
                   llvm::ArrayRef<int64_t> group, int64_t peer) override;
  llvm::Error recv(std::vector<double> &data, llvm::ArrayRef<int64_t> group,
                   int64_t peer) override;

  RuntimeCallbacks runtimeCallbacks(bool asynchronous) override;
  llvm::Error flush() override;
  int64_t firstFailure(bool ok) override;
  int64_t firstDifferent(uint64_t value) override;
  std::vector<std::string> gatherBytes(const std::string &mine,
                                       const char *what) override;
  double receiveWaitMs() const override { return recvWaitMs; }
  llvm::Error
  prepareGroups(llvm::ArrayRef<std::vector<int64_t>> groups) override;

private:
  /// The communicator of the ranks `group` (group-local index i is rank
  /// group[i]).
  llvm::Expected<MPI_Comm> communicatorOf(llvm::ArrayRef<int64_t> group);
  /// communicatorOf without reporting the start of communication.
  llvm::Expected<MPI_Comm> lookupOrCreate(llvm::ArrayRef<int64_t> group);
  /// Buffered send: the message is copied and sent with MPI_Isend, so that
  /// the sender goes on (a pipeline stage sends its activations and then
  /// waits for a gradient from the same peer); flush() completes it.
  llvm::Error send(const void *data, int64_t count, MPI_Datatype type,
                   llvm::ArrayRef<int64_t> group, int64_t peer);
  llvm::Error recv(void *data, int64_t count, MPI_Datatype type,
                   llvm::ArrayRef<int64_t> group, int64_t peer);

  static int runtimeCollective(void *user, const StrataRtCollective *c,
                               void **request, char *error, size_t errorSize);
  static int runtimeWait(void *user, void *request, char *error,
                         size_t errorSize);
  static int runtimeSend(void *user, const void *data, int64_t count,
                         int64_t dtype, const int64_t *ranks, int64_t numRanks,
                         int64_t peer, char *error, size_t errorSize);
  static int runtimeRecv(void *user, void *data, int64_t count, int64_t dtype,
                         const int64_t *ranks, int64_t numRanks, int64_t peer,
                         char *error, size_t errorSize);

  class Exchange;

  /// Open MPI's choice of algorithm for MPI_Iallreduce (an MPI_T control
  /// variable), or null where MPI has none or the user chose one.
  class IallreduceAlgorithm;
  std::unique_ptr<IallreduceAlgorithm> iallreduceAlgorithm;

  MPI_Comm comm;
  int myRank = 0, worldSize = 1;
  double waitLimit = 0;
  double recvWaitMs = 0;
  std::map<std::vector<int>, MPI_Comm> comms;
  struct Outgoing {
    std::vector<char> bytes;
    MPI_Request request;
  };
  std::vector<std::unique_ptr<Outgoing>> outgoing;
};

} // namespace strata

#endif // STRATA_EXECUTION_MPICOMMUNICATOR_H
