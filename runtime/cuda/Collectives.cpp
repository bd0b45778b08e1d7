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
#include <set>
#include <string>
#include <thread>

namespace strata::cuda {

Communicators::~Communicators() {
  for (auto &[link, l] : links)
    if (l.stream)
      cudaStreamDestroy(l.stream);
  for (cudaEvent_t e : freeEvents)
    cudaEventDestroy(e);
  for (auto &[site, p] : pending)
    cudaEventDestroy(p.done);
}

std::vector<ncclComm_t> Communicators::all() const {
  std::vector<ncclComm_t> result;
  for (auto &[ranks, c] : groups)
    if (c)
      result.push_back(c);
  for (auto &[link, l] : links)
    if (l.comm)
      result.push_back(l.comm);
  return result;
}

void Communicators::release(bool abort) {
  // Destroying flushes what was issued, which after a failure (operations
  // without their peers) would never end: abort then.
  for (ncclComm_t c : all())
    abort ? ncclCommAbort(c) : ncclCommDestroy(c);
  groups.clear();
  // The links' operations have ended (aborted or flushed); what else their
  // streams hold (waits for the compute stream, frees of send copies) ends
  // too, so waiting leaves no work in flight on a stream that is gone.
  for (auto &[link, l] : links)
    if (l.stream) {
      cudaStreamSynchronize(l.stream);
      cudaStreamDestroy(l.stream);
    }
  links.clear();
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

void abortCommunicators(StrataRtContext *ctx, int64_t site, std::string why) {
  auto &c = *ctx->comms;
  ctx->fail(site, why);
  c.release(/*abort=*/true);
  c.aborted = true;
  c.abortReason = std::move(why);
  c.abortSite = site;
  // The aborted collectives end; so does the rest of the step.
  cudaStreamSynchronize(ctx->comm);
  cudaStreamSynchronize(ctx->compute);
}

namespace {

/// After an abort, records why collective, send or receive `name` cannot
/// run and returns true.
bool refusedAfterAbort(StrataRtContext *ctx, int64_t site, const char *name) {
  const Communicators &c = *ctx->comms;
  if (!c.aborted)
    return false;
  ctx->fail(site,
            std::string(name) +
                ": the NCCL communicators were aborted after an "
                "earlier error at " +
                (c.abortSite < 0 ? std::string("the step's end")
                                 : "site " + std::to_string(c.abortSite)) +
                " (" + c.abortReason + ")");
  return true;
}

bool ncclOk(StrataRtContext *ctx, int64_t site, ncclResult_t r,
            const char *what) {
  // (Communicators are blocking: an operation is enqueued on return.)
  if (r == ncclSuccess)
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
  {
    // Blocks until every rank of the group arrives.
    strata::rt::HostCall inHost(*ctx, site);
    if (!ncclOk(ctx, site, ncclCommInitRank(&comm, int(numRanks), id, int(me)),
                "ncclCommInitRank"))
      return nullptr;
  }
  groups[key] = comm;
  return comm;
}

/// The link from world rank `from` to `to`. ncclCommInitRank blocks until
/// the peer makes the same communicator, so a link made on the first
/// message of its direction would deadlock two ranks whose first messages
/// to each other go opposite ways (both send, then both receive): each
/// would wait in a different communicator. So the first message either way
/// between two ranks makes both links, in an order both agree on: the
/// lower rank makes both ids and the host's send carries them to the
/// higher (whichever way the message goes), then both create the lower
/// rank's sending link, then the higher rank's.
Communicators::Link *link(StrataRtContext *ctx, int64_t site, int64_t from,
                          int64_t to, const int64_t *ranks, int64_t numRanks,
                          int64_t peer) {
  auto &links = ctx->comms->links;
  if (auto it = links.find({from, to}); it != links.end())
    return &it->second;
  int64_t other = from == ctx->rank ? to : from;
  bool lower = ctx->rank < other;
  int64_t low = lower ? ctx->rank : other, high = lower ? other : ctx->rank;
  // [0]: low to high, [1]: high to low.
  ncclUniqueId ids[2];
  std::memset(ids, 0, sizeof(ids));
  Communicators::Link made[2];
  char error[256] = {0};
  // Host calls that wait for the peer, until both links exist.
  strata::rt::HostCall inHost(*ctx, site);
  if (lower) {
    for (ncclUniqueId &id : ids)
      if (!ncclOk(ctx, site, ncclGetUniqueId(&id), "ncclGetUniqueId"))
        return nullptr;
    if (ctx->send(ctx->p2pUser, ids, sizeof(ids), STRATA_RT_U8, ranks, numRanks,
                  peer, error, sizeof(error)) != 0) {
      ctx->fail(site, std::string("sharing the NCCL ids: ") +
                          (error[0] ? error : "the host's send failed"));
      return nullptr;
    }
  } else if (ctx->recv(ctx->p2pUser, ids, sizeof(ids), STRATA_RT_U8, ranks,
                       numRanks, peer, error, sizeof(error)) != 0) {
    ctx->fail(site, std::string("sharing the NCCL ids: ") +
                        (error[0] ? error : "the host's receive failed"));
    return nullptr;
  }
  for (int d = 0; d < 2; ++d) {
    // Rank 0 of a link's communicator is its sender.
    int me = (d == 0) == lower ? 0 : 1;
    Communicators::Link &l = made[d];
    if (ctx->check(site,
                   cudaStreamCreateWithFlags(&l.stream, cudaStreamNonBlocking),
                   "creating a stream") &&
        ncclOk(ctx, site, ncclCommInitRank(&l.comm, 2, ids[d], me),
               "ncclCommInitRank"))
      continue;
    // Nothing was issued on what was made: undo it.
    for (int k = 0; k <= d; ++k) {
      if (k < d && made[k].comm)
        ncclCommAbort(made[k].comm);
      if (made[k].stream)
        cudaStreamDestroy(made[k].stream);
    }
    return nullptr;
  }
  links[{low, high}] = made[0];
  links[{high, low}] = made[1];
  return &links[{from, to}];
}

/// The checks of a send (or receive) and the link it takes to (from) `peer`
/// of this rank's list of `group`, with NCCL's type of `dtype`; null with
/// the failure recorded.
Communicators::Link *pointToPoint(StrataRtContext *ctx, int64_t site,
                                  bool sending, int64_t dtype, int64_t peer,
                                  const int64_t *group, ncclDataType_t &type) {
  const int64_t *ranks = nullptr;
  int64_t numRanks = 0;
  const void *host =
      sending ? (const void *)ctx->send : (const void *)ctx->recv;
  if (!strata::rt::pointToPointGroup(*ctx, site, host, group, peer, ranks,
                                     numRanks))
    return nullptr;
  if (!ncclType(dtype, type)) {
    unsupportedType(ctx, site, sending ? "send" : "recv", dtype);
    return nullptr;
  }
  return sending
             ? link(ctx, site, ctx->rank, ranks[peer], ranks, numRanks, peer)
             : link(ctx, site, ranks[peer], ctx->rank, ranks, numRanks, peer);
}

} // namespace

bool shareGroupId(StrataRtContext *ctx, int64_t site, const int64_t *ranks,
                  int64_t numRanks, ncclUniqueId &id) {
  std::memset(&id, 0, sizeof(id));
  if (ranks[0] == ctx->rank &&
      !ncclOk(ctx, site, ncclGetUniqueId(&id), "ncclGetUniqueId"))
    return false;
  return strata::rt::hostBroadcast(*ctx, site, &id, int64_t(sizeof(id)), ranks,
                                   numRanks, "sharing the NCCL id");
}

void finishStreams(StrataRtContext *ctx) {
  auto &c = *ctx->comms;
  std::vector<cudaStream_t> streams = {ctx->compute, ctx->comm};
  for (auto &[ends, l] : c.links)
    streams.push_back(l.stream);
  std::vector<ncclComm_t> comms = c.all();
  if (comms.empty()) {
    for (cudaStream_t s : streams)
      ctx->check(-1, cudaStreamSynchronize(s), "the step's kernels");
    return;
  }
  auto started = std::chrono::steady_clock::now();
  for (cudaStream_t s : streams) {
    // Poll, so that a collective that cannot finish (a rank that stopped)
    // ends the step with an error instead of a hang. The stream is queried
    // itself: nothing is created or recorded that could fail and leave the
    // wait undone.
    while (true) {
      cudaError_t state = cudaStreamQuery(s);
      if (state == cudaSuccess)
        break;
      if (state != cudaErrorNotReady) {
        // The device failed (a kernel's fault): the collectives and
        // transfers still in flight cannot be counted on to end, and the
        // peers must not wait for them.
        ctx->check(-1, state, "the step's kernels");
        return abortCommunicators(
            ctx, -1,
            std::string("the device failed while collectives were in "
                        "flight: ") +
                cudaGetErrorString(state));
      }
      for (ncclComm_t comm : comms) {
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(comm, &async);
        if (async != ncclSuccess && async != ncclInProgress)
          return abortCommunicators(
              ctx, -1,
              std::string("a collective failed: ") + ncclGetErrorString(async) +
                  " (another rank stopped or a link broke)");
      }
      double waited = std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - started)
                          .count();
      if (ctx->collectiveTimeout > 0 && waited > ctx->collectiveTimeout)
        return abortCommunicators(
            ctx, -1,
            "the step's collectives did not finish within " +
                std::to_string(ctx->collectiveTimeout) +
                " s (a rank that does not reach them); aborted");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    // Idle, so this returns at once; the pool reuses the send copies freed
    // on a link's stream once the host has synchronized with it.
    ctx->check(-1, cudaStreamSynchronize(s), "the step's kernels");
  }
}

} // namespace strata::cuda

using namespace strata::cuda;

extern "C" {

void strata_rt_collective(StrataRtContext *ctx, int64_t site, int64_t op,
                          void *out, const void *in, int64_t dtype, int64_t n,
                          int64_t kind, int64_t root, const int64_t *group) {
  cudaSetDevice(ctx->device);
  const char *name = nullptr;
  const int64_t *ranks = nullptr;
  int64_t numRanks = 0;
  ncclDataType_t type;
  if (refusedAfterAbort(ctx, site, strata::rt::collectiveName(op)) ||
      !strata::rt::collectivePrologue(*ctx, site, op, dtype, n, kind, root,
                                      group, name, ranks, numRanks))
    return;
  if (!ncclType(dtype, type))
    return unsupportedType(ctx, site, name, dtype);
  ncclComm_t comm = groupCommunicator(ctx, site, ranks, numRanks);
  if (!comm || !order(ctx, site, ctx->compute, ctx->comm))
    return;
  // A mean is the sum divided by the group's size once, in f32, as the CPU
  // runtime computes it (NCCL's average scales each input first).
  bool mean = kind == 1 &&
              (op == STRATA_RT_ALL_REDUCE || op == STRATA_RT_REDUCE_SCATTER);
  ncclRedOp_t reduce = ncclSum;
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
  if (mean &&
      !divideOnStream(ctx, site, out, n, dtype, numRanks, ctx->comm, name))
    return;
  cudaEvent_t done = takeEvent(ctx, site);
  if (!done || !ctx->check(site, cudaEventRecord(done, ctx->comm), name))
    return;
  auto &pending = ctx->comms->pending;
  if (auto it = pending.find(site); it != pending.end()) {
    // Started again before its wait: the later readers wait for both.
    ctx->check(site, cudaStreamWaitEvent(ctx->compute, it->second.done, 0),
               name);
    ctx->comms->freeEvents.push_back(it->second.done);
  }
  pending[site] = {done, name};
}

void strata_rt_connect(StrataRtContext *ctx, int64_t site,
                       const int64_t *plan) {
  cudaSetDevice(ctx->device);
  std::vector<strata::rt::Connection> connections;
  if (refusedAfterAbort(ctx, site, "connect") ||
      !strata::rt::connectHost(*ctx, site, plan, connections))
    return;
  // The NCCL communicators of the collectives' lists, in sorted order, then
  // the links of the rank pairs, in sorted order: every rank makes them in
  // one global order, so the first one still missing is each of its
  // members' next (none waits for a rank that waits for it).
  std::set<std::vector<int64_t>> lists;
  for (const strata::rt::Connection &c : connections)
    if (c.peer < 0)
      lists.insert(c.ranks);
  for (const std::vector<int64_t> &ranks : lists)
    if (!groupCommunicator(ctx, site, ranks.data(), int64_t(ranks.size())))
      return;
  for (const strata::rt::Connection *c : strata::rt::linksOf(connections))
    if (!link(ctx, site, ctx->rank, c->ranks[c->peer], c->ranks.data(),
              int64_t(c->ranks.size()), c->peer))
      return;
}

void strata_rt_wait(StrataRtContext *ctx, int64_t site) {
  auto &pending = ctx->comms->pending;
  auto it = pending.find(site);
  if (it == pending.end())
    return;
  Communicators::Pending p = it->second;
  pending.erase(it);
  // With tracing, the compute stream's stall is an event of the site (its
  // second of the step, after the one of its start), as on the CPU runtime.
  strata_rt_trace_begin(ctx, site);
  ctx->check(site, cudaStreamWaitEvent(ctx->compute, p.done, 0), p.name);
  strata_rt_trace_end(ctx, site);
  ctx->comms->freeEvents.push_back(p.done);
}

void strata_rt_send(StrataRtContext *ctx, int64_t site, const void *in,
                    int64_t dtype, int64_t n, int64_t peer,
                    const int64_t *group) {
  cudaSetDevice(ctx->device);
  if (refusedAfterAbort(ctx, site, "send"))
    return;
  ncclDataType_t type;
  Communicators::Link *l =
      pointToPoint(ctx, site, /*sending=*/true, dtype, peer, group, type);
  if (!l)
    return;
  // Buffered, as the ABI's send: the message is copied on the compute
  // stream and sent from the copy, so nothing on the compute stream waits
  // for the peer to receive (a pipeline stage sends its activations, then
  // receives a gradient from the same peer). The copy comes from the
  // context's pool, whose reuse rules never make the compute stream wait
  // for the link's stream, and is freed on the link's stream behind the
  // send.
  size_t bytes = size_t(n) * size_t(strata_rt_element_bytes(dtype));
  void *copy = nullptr;
  if (!ctx->check(site,
                  cudaMallocFromPoolAsync(&copy, std::max<size_t>(bytes, 1),
                                          ctx->pool, ctx->compute),
                  "send") ||
      !ctx->check(site,
                  cudaMemcpyAsync(copy, in, bytes, cudaMemcpyDeviceToDevice,
                                  ctx->compute),
                  "send") ||
      !order(ctx, site, ctx->compute, l->stream)) {
    if (copy)
      cudaFreeAsync(copy, ctx->compute);
    return;
  }
  ncclOk(ctx, site,
         ncclSend(copy, size_t(n), type, /*peer=*/1, l->comm, l->stream),
         "send");
  ctx->check(site, cudaFreeAsync(copy, l->stream), "send");
}

void strata_rt_recv(StrataRtContext *ctx, int64_t site, void *out,
                    int64_t dtype, int64_t n, int64_t peer,
                    const int64_t *group) {
  cudaSetDevice(ctx->device);
  if (refusedAfterAbort(ctx, site, "recv"))
    return;
  ncclDataType_t type;
  Communicators::Link *l =
      pointToPoint(ctx, site, /*sending=*/false, dtype, peer, group, type);
  if (!l)
    return;
  // Earlier readers of `out` finish before it is overwritten; its readers
  // run after the transfer (a receive completes where it is called).
  if (!order(ctx, site, ctx->compute, l->stream) ||
      !ncclOk(ctx, site,
              ncclRecv(out, size_t(n), type, /*peer=*/0, l->comm, l->stream),
              "recv"))
    return;
  order(ctx, site, l->stream, ctx->compute);
}

} // extern "C"
