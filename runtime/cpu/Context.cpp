//===- Context.cpp - Host side and collectives of the CPU runtime ---------===//
//
// The context's life cycle, errors, tracing, and the collectives, which call
// the host's functions (strata-run: MPI). Built once; the compute kernels
// (Kernels.cpp) are built for several instruction sets.
//
//===----------------------------------------------------------------------===//

#include "Context.h"

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <omp.h>
#include <string>

extern "C" {

StrataRtContext *strata_rt_create(const StrataRtOptions *options, char *error,
                                  size_t errorSize) {
  std::string refused = strata::rt::checkOptions(options, "CPU runtime", 1);
  if (!refused.empty())
    return strata::rt::refuse(refused, error, errorSize);
  auto *ctx = new StrataRtContext;
  ctx->seed = options->seed;
  ctx->rank = options->rank;
  ctx->shard = options->shard;
  ctx->threads = std::max<int64_t>(options->threads, 1);
  ctx->gemmAutotune = STRATA_RT_OPTION_GIVEN(options, gemmAutotune) &&
                      options->gemmAutotune != 0;
  ctx->gemmPacked = std::strcmp(strata_rt_isa(), "avx2") == 0;
  omp_set_num_threads(int(ctx->threads));
  return ctx;
}

void strata_rt_step_end(StrataRtContext *ctx) {
  // (A group left open still runs its updates.)
  ctx->runGroup();
  strata::rt::checkNoUpdatesOpen(*ctx);
  // The CPU runtime finishes every call before returning; a collective
  // still in flight means the step never waited for it.
  if (!ctx->pending.empty() && ctx->error.empty())
    ctx->fail(ctx->pending.begin()->first,
              std::string(ctx->pending.begin()->second.name) +
                  " was started but never waited for");
}

void strata_rt_destroy(StrataRtContext *ctx) { delete ctx; }

// The updates of a group run at its end, last first (Context.h).
void strata_rt_updates_begin(StrataRtContext *ctx, int64_t site) {
  strata::rt::openUpdates(*ctx, site);
}

void strata_rt_updates_end(StrataRtContext *ctx, int64_t site) {
  ctx->runGroup();
  strata::rt::closeUpdates(*ctx, site);
}

void strata_rt_trace_begin(StrataRtContext *ctx, int64_t site) {
  if (ctx->tracing)
    ctx->openBegin = ctx->nowUs();
}

void strata_rt_trace_end(StrataRtContext *ctx, int64_t site) {
  if (ctx->tracing)
    ctx->trace.push_back({site, ctx->openBegin, ctx->nowUs()});
}

const StrataRtTraceEvent *strata_rt_take_trace(StrataRtContext *ctx,
                                               size_t *count) {
  ctx->taken.swap(ctx->trace);
  ctx->trace.clear();
  *count = ctx->taken.size();
  return ctx->taken.data();
}

void *strata_rt_alloc(StrataRtContext *ctx, int64_t bytes) {
  // Never zero-sized; a multiple of the alignment, as aligned_alloc wants.
  size_t size = (size_t(std::max<int64_t>(bytes, 1)) + 255) / 256 * 256;
  void *memory = std::aligned_alloc(256, size);
  if (!memory) {
    ctx->fail(-1, "cannot allocate " + std::to_string(bytes) + " bytes");
    return nullptr;
  }
  std::memset(memory, 0, size);
  return memory;
}

void strata_rt_free(StrataRtContext *, void *memory) { std::free(memory); }

void strata_rt_write(StrataRtContext *, void *to, const void *from,
                     int64_t bytes) {
  std::memcpy(to, from, size_t(bytes));
}

void strata_rt_read(StrataRtContext *, void *to, const void *from,
                    int64_t bytes) {
  std::memcpy(to, from, size_t(bytes));
}

int64_t strata_rt_scratch_bytes(StrataRtContext *ctx) {
  return int64_t((ctx->scratch.capacity() + ctx->gemmWiden.capacity() +
                  ctx->gradWiden.capacity() + ctx->packedBlocks.capacity() +
                  ctx->gemmTiming.capacity()) *
                 sizeof(float));
}

namespace {
/// A mean is the sum divided by the group's size (in f32, rounded once for
/// bf16 and f16).
void finishMean(const StrataRtContext::Pending &p) {
  if (p.mean)
    strata::cpu::withFloatType(p.dtype, [&](auto tag) {
      using T = decltype(tag);
      float count = float(p.numRanks);
      T *o = static_cast<T *>(p.out);
      for (int64_t i = 0; i < p.n; ++i)
        o[i] = T(float(o[i]) / count);
    });
}
} // namespace

void strata_rt_collective(StrataRtContext *ctx, int64_t site, int64_t op,
                          void *out, const void *in, int64_t dtype, int64_t n,
                          int64_t kind, int64_t root, const int64_t *group) {
  const char *name = nullptr;
  const int64_t *ranks = nullptr;
  int64_t numRanks = 0;
  if (!strata::rt::collectivePrologue(*ctx, site, op, dtype, n, kind, root,
                                      group, name, ranks, numRanks))
    return;
  StrataRtCollective c{op, in, out, n, dtype, ranks, numRanks, root};
  if (op == STRATA_RT_BROADCAST || op == STRATA_RT_ALL_REDUCE) {
    // In place on the output.
    if (out != in)
      std::memcpy(out, in, n * strata_rt_element_bytes(dtype));
    c.send = out;
  } else if (op == STRATA_RT_ALL_GATHER) {
    c.count = n / numRanks;
  }
  StrataRtContext::Pending p{nullptr, out, n, dtype,
                             kind == 1 && (op == STRATA_RT_ALL_REDUCE ||
                                           op == STRATA_RT_REDUCE_SCATTER),
                             numRanks, name};
  char error[256] = {0};
  strata::rt::HostCall inHost(*ctx, site);
  if (ctx->collective(ctx->collectiveUser, &c, ctx->wait ? &p.request : nullptr,
                      error, sizeof(error)) != 0) {
    ctx->fail(site, error[0] ? error : std::string(name) + " failed");
    return;
  }
  if (ctx->wait)
    ctx->pending[site] = p;
  else
    finishMean(p);
}

void strata_rt_wait(StrataRtContext *ctx, int64_t site) {
  auto it = ctx->pending.find(site);
  if (it == ctx->pending.end())
    return; // completed where it started
  StrataRtContext::Pending p = it->second;
  ctx->pending.erase(it);
  char error[256] = {0};
  // With tracing, the time spent completing it is an event of its site (its
  // second of the step, after the one of its start).
  strata_rt_trace_begin(ctx, site);
  strata::rt::HostCall inHost(*ctx, site);
  if (ctx->wait(ctx->collectiveUser, p.request, error, sizeof(error)) == 0)
    finishMean(p);
  else
    ctx->fail(site, error[0] ? error : std::string(p.name) + " failed");
  strata_rt_trace_end(ctx, site);
}

void strata_rt_connect(StrataRtContext *ctx, int64_t site,
                       const int64_t *plan) {
  std::vector<strata::rt::Connection> connections;
  strata::rt::connectHost(*ctx, site, plan, connections);
}

void strata_rt_send(StrataRtContext *ctx, int64_t site, const void *in,
                    int64_t dtype, int64_t n, int64_t peer,
                    const int64_t *group) {
  const int64_t *ranks = nullptr;
  int64_t numRanks = 0;
  if (!strata::rt::pointToPointGroup(*ctx, site, (const void *)ctx->send, group,
                                     peer, ranks, numRanks))
    return;
  char error[256] = {0};
  strata::rt::HostCall inHost(*ctx, site);
  if (ctx->send(ctx->p2pUser, in, n, dtype, ranks, numRanks, peer, error,
                sizeof(error)) != 0)
    ctx->fail(site, error[0] ? error : "send failed");
}

void strata_rt_recv(StrataRtContext *ctx, int64_t site, void *out,
                    int64_t dtype, int64_t n, int64_t peer,
                    const int64_t *group) {
  const int64_t *ranks = nullptr;
  int64_t numRanks = 0;
  if (!strata::rt::pointToPointGroup(*ctx, site, (const void *)ctx->recv, group,
                                     peer, ranks, numRanks))
    return;
  char error[256] = {0};
  strata::rt::HostCall inHost(*ctx, site);
  if (ctx->recv(ctx->p2pUser, out, n, dtype, ranks, numRanks, peer, error,
                sizeof(error)) != 0)
    ctx->fail(site, error[0] ? error : "recv failed");
}

} // extern "C"
