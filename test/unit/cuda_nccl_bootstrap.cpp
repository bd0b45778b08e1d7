//===- cuda_nccl_bootstrap.cpp - NCCL's unique id over MPI ----------------===//
//
// The CUDA runtime's NCCL bootstrap on the ranks of an MPI job, without a
// GPU: each rank's context shares the id of a communicator of every rank
// through the host's broadcast (here MPI_Bcast, as strata-run's), and rank 0
// checks that all ranks hold its id. Then a host broadcast that fails is
// reported at the site that asked for it. test/run/cuda-nccl-bootstrap.test
// runs it on two ranks.
//
//===----------------------------------------------------------------------===//

#include "Collectives.h"

#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

int broadcast(void *, const StrataRtCollective *c, void **, char *error,
              size_t errorSize) {
  if (c->op != STRATA_RT_BROADCAST || c->dtype != STRATA_RT_U8) {
    std::snprintf(error, errorSize, "unexpected collective %lld",
                  (long long)c->op);
    return 1;
  }
  // The group is every rank in order, so world rank ranks[root] is root.
  return MPI_Bcast(c->recv, int(c->count), MPI_BYTE, int(c->ranks[c->root]),
                   MPI_COMM_WORLD) == MPI_SUCCESS
             ? 0
             : 1;
}

int refuse(void *, const StrataRtCollective *, void **, char *error,
           size_t errorSize) {
  std::snprintf(error, errorSize, "the host lost its peers");
  return 1;
}

} // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<int64_t> ranks(size);
  for (int i = 0; i < size; ++i)
    ranks[i] = i;

  StrataRtContext ctx;
  ctx.rank = rank;
  ctx.collective = broadcast;
  ncclUniqueId id;
  bool ok = strata::cuda::shareGroupId(&ctx, 7, ranks.data(), size, id);
  if (!ok)
    std::fprintf(stderr, "rank %d: %s\n", rank, ctx.error.c_str());
  std::vector<char> all(size_t(size) * sizeof(id));
  MPI_Gather(&id, sizeof(id), MPI_BYTE, all.data(), sizeof(id), MPI_BYTE, 0,
             MPI_COMM_WORLD);
  int status = ok ? 0 : 1;
  if (rank == 0) {
    static const ncclUniqueId zero = {};
    bool made = std::memcmp(&id, &zero, sizeof(id)) != 0;
    int same = 0;
    for (int r = 0; r < size; ++r)
      same += std::memcmp(all.data() + r * sizeof(id), &id, sizeof(id)) == 0;
    std::printf("ranks %d, id made %s, ranks holding it %d\n", size,
                made ? "yes" : "no", same);
    status |= made && same == size ? 0 : 1;
  }

  StrataRtContext failing;
  failing.rank = rank;
  failing.collective = refuse;
  ncclUniqueId unused;
  if (!strata::cuda::shareGroupId(&failing, 3, ranks.data(), size, unused) &&
      rank == 0)
    std::printf("site %lld: %s\n", (long long)failing.errorSite,
                failing.error.c_str());
  MPI_Finalize();
  return status;
}
