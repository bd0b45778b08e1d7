//===- Collectives.h - NCCL in the CUDA runtime -----------------*- C++ -*-===//
//
// One NCCL communicator per rank list of a collective's group and one per
// direction of a point-to-point link, each created where the step first
// uses it, from a unique id that the host's own functions carry (the
// collective broadcast of StrataRtCollectiveFn for a group, its send and
// receive for a link: MPI under strata-run). Private to runtime/cuda.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_CUDA_COLLECTIVES_H
#define STRATA_RUNTIME_CUDA_COLLECTIVES_H

#include "Context.h"

#include <nccl.h>

#include <map>
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
  /// By (sender, receiver) world ranks.
  std::map<std::pair<int64_t, int64_t>, Link> links;
  std::vector<cudaEvent_t> freeEvents;

  Communicators() = default;
  Communicators(const Communicators &) = delete;
  Communicators &operator=(const Communicators &) = delete;
  ~Communicators();

  /// Every communicator, to poll and to abort.
  std::vector<ncclComm_t> all() const;
  /// Destroys every communicator, or aborts them (after a failure, when
  /// operations may be left without their peers).
  void release(bool abort);
};

/// NCCL's type of ABI element type `dtype`, or false.
bool ncclType(int64_t dtype, ncclDataType_t &type);

/// The unique id of a new communicator of `ranks` (which hold this rank):
/// its first rank makes it, the host's broadcast carries it to the others
/// (needs no device). False with the failure recorded.
bool shareGroupId(StrataRtContext *ctx, int64_t site, const int64_t *ranks,
                  int64_t numRanks, ncclUniqueId &id);

/// Waits until every stream of the context is idle; while it waits, a
/// collective's asynchronous failure (a rank that died, a broken link)
/// is recorded and every communicator aborted, so the step ends.
void finishStreams(StrataRtContext *ctx);

} // namespace strata::cuda

#endif // STRATA_RUNTIME_CUDA_COLLECTIVES_H
