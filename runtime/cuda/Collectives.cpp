//===- Collectives.cpp - NCCL in the CUDA runtime -------------------------===//
//
// strata_rt_collective records an event on the compute stream, makes the
// communication stream wait for it and runs the NCCL collective there;
// strata_rt_wait makes the compute stream wait for its completion, so the
// kernels between the two overlap it. Sends and receives run on streams
// of their own, on a communicator per direction: a pipeline stage that
// sends its activations and then receives a gradient from the same peer
// never waits for the peer's send to finish first. A later writer of a
// sent buffer, and every reader of a received one, run after the transfer.
//
//===----------------------------------------------------------------------===//

#include "Collectives.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

namespace strata::cuda {

Communicators::~Communicators() {
  for (ncclComm_t c : all())
    ncclCommDestroy(c);
  for (cudaEvent_t e : freeEvents)
    cudaEventDestroy(e);
  for (auto &[site, p] : pending)
    cudaEventDestroy(p.done);
  for (cudaStream_t s : {sendStream, recvStream})
    if (s)
      cudaStreamDestroy(s);
}

std::vector<ncclComm_t> Communicators::all() const {
  std::vector<ncclComm_t> result;
  for (auto &[ranks, c] : groups)
    result.push_back(c);
  for (auto &[link, c] : links)
    result.push_back(c);
  return result;
}

bool ncclType(int64_t dtype, ncclDataType_t &type) {
  switch (dtype) {
  case STRATA_RT_F32:
    type = ncclFloat32;
    return true;
  case STRATA_RT_BF16:
    type = ncclBfloat16;
    return true;
  case STRATA_RT_F16:
    type = ncclFloat16;
    return true;
  case STRATA_RT_I32:
    type = ncclInt32;
    return true;
  case STRATA_RT_I64:
    type = ncclInt64;
    return true;
  case STRATA_RT_I8:
    type = ncclInt8;
    return true;
  case STRATA_RT_U8:
    type = ncclUint8;
    return true;
  }
  return false;
}

namespace {

bool ncclOk(StrataRtContext *ctx, int64_t site, ncclResult_t r,
            const char *what) {
  if (r == ncclSuccess || r == ncclInProgress)
    return true;
  ctx->fail(site, std::string(what) + ": " + ncclGetErrorString(r) + " (" +
                      ncclGetLastError(nullptr) + ")");
  return false;
}

cudaEvent_t takeEvent(StrataRtContext *ctx, int64_t site) {
  auto &free = ctx->comms->freeEvents;
  if (!free.empty()) {
    cudaEvent_t e = free.back();
    free.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  if (!ctx->check(site, cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                  "creating an event"))
    return nullptr;
  return e;
}

/// Makes `after` wait for the work issued on `before` so far.
bool order(StrataRtContext *ctx, int64_t site, cudaStream_t before,
           cudaStream_t after) {
  cudaEvent_t e = takeEvent(ctx, site);
  if (!e)
    return false;
  bool ok =
      ctx->check(site, cudaEventRecord(e, before), "ordering streams") &&
      ctx->check(site, cudaStreamWaitEvent(after, e, 0), "ordering streams");
  ctx->comms->freeEvents.push_back(e);
  return ok;
}

/// The communicator of `ranks` (this rank among them), created on first use.
ncclComm_t groupCommunicator(StrataRtContext *ctx, int64_t site,
                             const int64_t *ranks, int64_t numRanks) {
  std::vector<int64_t> key(ranks, ranks + numRanks);
  auto &groups = ctx->comms->groups;
  if (auto it = groups.find(key); it != groups.end())
    return it->second;
  ncclUniqueId id;
  if (!shareGroupId(ctx, site, ranks, numRanks, id))
    return nullptr;
  int64_t me = std::find(ranks, ranks + numRanks, ctx->rank) - ranks;
  ncclComm_t comm = nullptr;
  if (!ncclOk(ctx, site, ncclCommInitRank(&comm, int(numRanks), id, int(me)),
              "ncclCommInitRank"))
    return nullptr;
  groups[key] = comm;
  return comm;
}

/// The communicator of the link from world rank `from` to `to`, created on
/// its first message: the sender makes the id and the host's send carries
/// it (the first message of that direction).
ncclComm_t linkCommunicator(StrataRtContext *ctx, int64_t site, int64_t from,
                            int64_t to, const int64_t *ranks, int64_t numRanks,
                            int64_t peer) {
  auto &links = ctx->comms->links;
  if (auto it = links.find({from, to}); it != links.end())
    return it->second;
  bool sender = from == ctx->rank;
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  char error[256] = {0};
  {
    strata::rt::HostCall inHost(*ctx, site);
    if (sender) {
      if (!ncclOk(ctx, site, ncclGetUniqueId(&id), "ncclGetUniqueId"))
        return nullptr;
      if (ctx->send(ctx->p2pUser, &id, sizeof(id), STRATA_RT_U8, ranks,
                    numRanks, peer, error, sizeof(error)) != 0) {
        ctx->fail(site, std::string("sharing the NCCL id: ") +
                            (error[0] ? error : "the host's send failed"));
        return nullptr;
      }
    } else if (ctx->recv(ctx->p2pUser, &id, sizeof(id), STRATA_RT_U8, ranks,
                         numRanks, peer, error, sizeof(error)) != 0) {
      ctx->fail(site, std::string("sharing the NCCL id: ") +
                          (error[0] ? error : "the host's receive failed"));
      return nullptr;
    }
  }
  ncclComm_t comm = nullptr;
  if (!ncclOk(ctx, site, ncclCommInitRank(&comm, 2, id, sender ? 0 : 1),
              "ncclCommInitRank"))
    return nullptr;
  links[{from, to}] = comm;
  return comm;
}

bool p2pStreams(StrataRtContext *ctx, int64_t site) {
  auto &c = *ctx->comms;
  for (cudaStream_t *s : {&c.sendStream, &c.recvStream})
    if (!*s &&
        !ctx->check(site, cudaStreamCreateWithFlags(s, cudaStreamNonBlocking),
                    "creating a stream"))
      return false;
  return true;
}

} // namespace

bool shareGroupId(StrataRtContext *ctx, int64_t site, const int64_t *ranks,
                  int64_t numRanks, ncclUniqueId &id) {
  std::memset(&id, 0, sizeof(id));
  if (ranks[0] == ctx->rank &&
      !ncclOk(ctx, site, ncclGetUniqueId(&id), "ncclGetUniqueId"))
    return false;
  StrataRtCollective c{
      STRATA_RT_BROADCAST, &id,   &id,      int64_t(sizeof(id)),
      STRATA_RT_U8,        ranks, numRanks, 0};
  char error[256] = {0};
  strata::rt::HostCall inHost(*ctx, site);
  if (ctx->collective(ctx->collectiveUser, &c, nullptr, error, sizeof(error)) !=
      0) {
    ctx->fail(site, std::string("sharing the NCCL id: ") +
                        (error[0] ? error : "the host's broadcast failed"));
    return false;
  }
  return true;
}

void finishStreams(StrataRtContext *ctx) {
  auto &c = *ctx->comms;
  std::vector<cudaEvent_t> idle;
  for (cudaStream_t s : {ctx->compute, ctx->comm, c.sendStream, c.recvStream}) {
    if (!s)
      continue;
    cudaEvent_t e = takeEvent(ctx, -1);
    if (!e || !ctx->check(-1, cudaEventRecord(e, s), "ending the step"))
      break;
    idle.push_back(e);
  }
  std::vector<ncclComm_t> comms = c.all();
  for (cudaEvent_t e : idle) {
    while (true) {
      cudaError_t state = cudaEventQuery(e);
      if (state == cudaSuccess)
        break;
      if (state != cudaErrorNotReady) {
        ctx->check(-1, state, "the step's kernels");
        break;
      }
      for (ncclComm_t comm : comms) {
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(comm, &async);
        if (async != ncclSuccess && async != ncclInProgress) {
          ctx->fail(-1, std::string("a collective failed: ") +
                            ncclGetErrorString(async) +
                            " (another rank stopped or a link broke)");
          for (ncclComm_t abort : comms)
            ncclCommAbort(abort);
          c.groups.clear();
          c.links.clear();
          return;
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  for (cudaEvent_t e : idle)
    c.freeEvents.push_back(e);
}

} // namespace strata::cuda

using namespace strata::cuda;

extern "C" {

void strata_rt_collective(StrataRtContext *ctx, int64_t site, int64_t op,
                          void *out, const void *in, int64_t dtype, int64_t n,
                          int64_t kind, int64_t root, const int64_t *group) {
  if (op < STRATA_RT_ALL_REDUCE || op > STRATA_RT_ALL_GATHER) {
    ctx->fail(site, "unknown collective " + std::to_string(op));
    return;
  }
  const char *name = strata::rt::collectiveName(op);
  ncclDataType_t type;
  if (!strata::rt::collectiveType(ctx, site, name, dtype, kind))
    return;
  if (!ncclType(dtype, type))
    return unsupportedType(ctx, site, name, dtype);
  if (!ctx->collective) {
    ctx->fail(site, std::string(name) + " needs several ranks");
    return;
  }
  const int64_t *ranks = nullptr;
  int64_t numRanks = 0;
  if (!strata::rt::findGroup(*ctx, site, group, ranks, numRanks))
    return;
  if (op == STRATA_RT_BROADCAST && (root < 0 || root >= numRanks)) {
    ctx->fail(site, "broadcast root " + std::to_string(root) +
                        " outside a group of " + std::to_string(numRanks));
    return;
  }
  if (op == STRATA_RT_ALL_GATHER && n % numRanks != 0) {
    ctx->fail(site, "all_gather of " + std::to_string(n) + " elements over " +
                        std::to_string(numRanks) + " ranks");
    return;
  }
  ncclComm_t comm = groupCommunicator(ctx, site, ranks, numRanks);
  if (!comm || !order(ctx, site, ctx->compute, ctx->comm))
    return;
  ncclRedOp_t reduce = kind == 1 ? ncclAvg : ncclSum;
  ncclResult_t r = ncclSuccess;
  switch (op) {
  case STRATA_RT_ALL_REDUCE:
    r = ncclAllReduce(in, out, size_t(n), type, reduce, comm, ctx->comm);
    break;
  case STRATA_RT_BROADCAST:
    r = ncclBroadcast(in, out, size_t(n), type, int(root), comm, ctx->comm);
    break;
  case STRATA_RT_REDUCE_SCATTER:
    r = ncclReduceScatter(in, out, size_t(n), type, reduce, comm, ctx->comm);
    break;
  case STRATA_RT_ALL_GATHER:
    r = ncclAllGather(in, out, size_t(n / numRanks), type, comm, ctx->comm);
    break;
  }
  if (!ncclOk(ctx, site, r, name))
    return;
  cudaEvent_t done = takeEvent(ctx, site);
  if (!done || !ctx->check(site, cudaEventRecord(done, ctx->comm), name))
    return;
  ctx->comms->pending[site] = {done, name};
}

void strata_rt_wait(StrataRtContext *ctx, int64_t site) {
  auto &pending = ctx->comms->pending;
  auto it = pending.find(site);
  if (it == pending.end())
    return;
  Communicators::Pending p = it->second;
  pending.erase(it);
  ctx->check(site, cudaStreamWaitEvent(ctx->compute, p.done, 0), p.name);
  ctx->comms->freeEvents.push_back(p.done);
}

void strata_rt_send(StrataRtContext *ctx, int64_t site, const void *in,
                    int64_t dtype, int64_t n, int64_t peer,
                    const int64_t *group) {
  const int64_t *ranks = nullptr;
  int64_t numRanks = 0;
  ncclDataType_t type;
  if (!strata::rt::pointToPointGroup(*ctx, site, (const void *)ctx->send, group,
                                     peer, ranks, numRanks))
    return;
  if (!ncclType(dtype, type))
    return unsupportedType(ctx, site, "send", dtype);
  ncclComm_t comm = linkCommunicator(ctx, site, ctx->rank, ranks[peer], ranks,
                                     numRanks, peer);
  if (!comm || !p2pStreams(ctx, site))
    return;
  cudaStream_t stream = ctx->comms->sendStream;
  // The send reads `in` after its producers; its later writers run after
  // the send.
  if (!order(ctx, site, ctx->compute, stream) ||
      !ncclOk(ctx, site,
              ncclSend(in, size_t(n), type, /*peer=*/1, comm, stream), "send"))
    return;
  order(ctx, site, stream, ctx->compute);
}

void strata_rt_recv(StrataRtContext *ctx, int64_t site, void *out,
                    int64_t dtype, int64_t n, int64_t peer,
                    const int64_t *group) {
  const int64_t *ranks = nullptr;
  int64_t numRanks = 0;
  ncclDataType_t type;
  if (!strata::rt::pointToPointGroup(*ctx, site, (const void *)ctx->recv, group,
                                     peer, ranks, numRanks))
    return;
  if (!ncclType(dtype, type))
    return unsupportedType(ctx, site, "recv", dtype);
  ncclComm_t comm = linkCommunicator(ctx, site, ranks[peer], ctx->rank, ranks,
                                     numRanks, peer);
  if (!comm || !p2pStreams(ctx, site))
    return;
  cudaStream_t stream = ctx->comms->recvStream;
  // Earlier readers of `out` finish before it is overwritten; its readers
  // run after the transfer.
  if (!order(ctx, site, ctx->compute, stream) ||
      !ncclOk(ctx, site,
              ncclRecv(out, size_t(n), type, /*peer=*/0, comm, stream), "recv"))
    return;
  order(ctx, site, stream, ctx->compute);
}

} // extern "C"
