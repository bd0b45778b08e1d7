//===- Communicator.h - The host side of a job's communication --*- C++ -*-===//
//
// What the training library needs from the ranks of a job: the collectives
// of the reference backend (in doubles), the runtime ABI's collective and
// point-to-point callbacks for compiled executables, and the host-side
// exchanges of a run (agreeing on failure, gathering checkpoints, traces and
// reports on rank 0). MpiCommunicator implements it over an MPI
// communicator; NCCL's device-side collectives come with the CUDA runtime.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_EXECUTION_COMMUNICATOR_H
#define STRATA_EXECUTION_COMMUNICATOR_H

#include "strata/Reference/Evaluator.h"
#include "strata/Runtime/StrataRuntime.h"

#include <functional>
#include <string>
#include <vector>

namespace strata {

/// The runtime ABI's communication callbacks (strata_rt_set_collectives,
/// strata_rt_set_point_to_point).
struct RuntimeCallbacks {
  StrataRtCollectiveFn collective = nullptr;
  /// Null: every collective completes where it starts.
  StrataRtWaitFn wait = nullptr;
  void *collectiveUser = nullptr;
  StrataRtSendFn send = nullptr;
  StrataRtRecvFn recv = nullptr;
  void *pointToPointUser = nullptr;
};

class Communicator : public reference::Communicator {
public:
  /// Ranks in the job (groups name ranks in 0..size()-1).
  virtual int64_t size() const = 0;

  /// The callbacks a compiled step calls. With `asynchronous`, collectives
  /// are started and completed by the runtime's wait (overlapping the
  /// backward pass); otherwise each completes where it starts.
  virtual RuntimeCallbacks runtimeCallbacks(bool asynchronous) = 0;

  /// Completes the sends a step left in flight (after every step).
  virtual llvm::Error flush() = 0;

  /// The lowest rank whose `ok` is false, or -1 when every rank's is true.
  /// Every rank calls it.
  virtual int64_t firstFailure(bool ok) = 0;

  /// The lowest rank whose `value` differs from rank 0's, or -1 when every
  /// rank's is the same. Every rank calls it.
  virtual int64_t firstDifferent(uint64_t value) = 0;

  /// Every rank's `mine`, on rank 0 in rank order (empty on other ranks).
  /// `what` names the exchange for a rank stopped during it.
  virtual std::vector<std::string> gatherBytes(const std::string &mine,
                                               const char *what) = 0;

  /// Milliseconds spent blocked in receives so far (a pipeline stage waiting
  /// for its neighbours: the bubble).
  virtual double receiveWaitMs() const = 0;

  /// Sets up the groups (rank lists) this rank's program communicates in,
  /// before its first step. Every rank calls it with its own groups, sorted;
  /// a group's members set it up together, in that one order on every rank
  /// (set up at first use instead, ranks that reach shared groups in
  /// different orders wait for each other for ever).
  virtual llvm::Error
  prepareGroups(llvm::ArrayRef<std::vector<int64_t>> groups) = 0;

  /// Called where host-side communication begins: with a description of an
  /// exchange outside a step, or null inside one (the executable knows the
  /// op); `onEnd` when an exchange outside a step is over. strata-run uses
  /// them to name, on SIGTERM, what a rank was waiting for.
  std::function<void(const char *what)> onBegin;
  std::function<void()> onEnd;
};

} // namespace strata

#endif // STRATA_EXECUTION_COMMUNICATOR_H
