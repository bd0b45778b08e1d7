//===- Collectives.h - NCCL in the CUDA runtime -----------------*- C++ -*-===//
//
// One NCCL communicator per rank list of a collective's group and one per
// direction of a point-to-point link, created where the step first uses
// the group or (both directions at once) either link between two ranks,
// from unique ids that the host's own functions carry (the collective
// broadcast of StrataRtCollectiveFn for a group, its send and receive for
// a link: MPI under strata-run). Private to runtime/cuda.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CUDA_COLLECTIVES_H
#define STRATA_RUNTIME_CUDA_COLLECTIVES_H

#include "Context.h"

#include <nccl.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace strata::cuda {

struct Communicators {
  /// Collectives started and not yet waited for, by call site: the event
  /// their completion records on the communication stream.
  struct Pending {
    cudaEvent_t done;
    const char *name;
  };
  std::map<int64_t, Pending> pending;
  /// By the group's rank list (world ranks, in the group's order).
  std::map<std::vector<int64_t>, ncclComm_t> groups;
  /// A point-to-point link, one per direction between two ranks: its own
  /// communicator and stream, so sends of one direction never wait behind
  /// receives of the other, nor behind another peer's transfers.
  struct Link {
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
  };
  /// By (sender, receiver) world ranks; both directions between two ranks
  /// are made together.
  std::map<std::pair<int64_t, int64_t>, Link> links;
  std::vector<cudaEvent_t> freeEvents;
  /// Set when the communicators were aborted after a failure (a rank that
  /// stopped, a broken link, the collective timeout). Aborted operations
  /// cannot be resumed, and new communicators would pair this rank with
  /// peers in another state, so every later collective, send and receive
  /// fails at once, naming the failure (`abortReason`, at `abortSite`: -1
  /// for the step's end).
  bool aborted = false;
  std::string abortReason;
  int64_t abortSite = -1;

  Communicators() = default;
  Communicators(const Communicators &) = delete;
  Communicators &operator=(const Communicators &) = delete;
  ~Communicators();

  /// Every communicator, to poll and to abort.
  std::vector<ncclComm_t> all() const;
  /// Destroys every communicator, or aborts them (after a failure, when
  /// operations may be left without their peers), then waits for the
  /// links' streams (whose operations have ended or were flushed) and
  /// destroys them.
  void release(bool abort);
};

/// NCCL's type of ABI element type `dtype`, or false.
bool ncclType(int64_t dtype, ncclDataType_t &type);

/// The unique id of a new communicator of `ranks` (which hold this rank):
/// its first rank makes it, the host's broadcast carries it to the others
/// (needs no device). False with the failure recorded.
bool shareGroupId(StrataRtContext *ctx, int64_t site, const int64_t *ranks,
                  int64_t numRanks, ncclUniqueId &id);

/// Records failure `why` at `site`, aborts every communicator (the context
/// is then `aborted`) and waits for the context's streams, whose
/// collectives and transfers end with their communicators.
void abortCommunicators(StrataRtContext *ctx, int64_t site, std::string why);

/// Waits until every stream of the context is idle; while it waits, a
/// collective's asynchronous failure (a rank that died, a broken link),
/// the collective timeout or a failure of the device is recorded and
/// every communicator aborted, so the step ends with nothing in flight.
void finishStreams(StrataRtContext *ctx);

} // namespace strata::cuda

#endif // STRATA_RUNTIME_CUDA_COLLECTIVES_H
