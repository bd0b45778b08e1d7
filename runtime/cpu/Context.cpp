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
#include <cstring>
#include <omp.h>
#include <string>

extern "C" {

void strata_rt_default_options(StrataRtOptions *options) {
  *options = StrataRtOptions{};
  options->abiVersion = STRATA_RT_ABI_VERSION;
  options->size = sizeof(StrataRtOptions);
  options->threads = 1;
  options->device = -1;
}

int64_t strata_rt_abi_version(void) { return STRATA_RT_ABI_VERSION; }

StrataRtContext *strata_rt_create(const StrataRtOptions *options, char *error,
                                  size_t errorSize) {
  auto refuse = [&](const std::string &message) -> StrataRtContext * {
    if (error && errorSize)
      std::snprintf(error, errorSize, "%s", message.c_str());
    return nullptr;
  };
  if (!options)
    return refuse("no options (fill them with strata_rt_default_options)");
  if (options->abiVersion != STRATA_RT_ABI_VERSION)
    return refuse("the caller was built for runtime ABI " +
                  std::to_string(options->abiVersion) +
                  "; this runtime implements ABI " +
                  std::to_string(STRATA_RT_ABI_VERSION));
  // Every field up to `device` exists in every version of the struct.
  if (options->size <
      int64_t(offsetof(StrataRtOptions, device) + sizeof(options->device)))
    return refuse("options of " + std::to_string(options->size) +
                  " bytes are too short (fill them with "
                  "strata_rt_default_options)");
  if (options->device != -1 && options->device != 0)
    return refuse("the CPU runtime has one device (0); device " +
                  std::to_string(options->device) + " was asked for");
  if (options->rank < 0 || options->shard < 0)
    return refuse("rank and shard must not be negative");
  auto *ctx = new StrataRtContext;
  ctx->seed = options->seed;
  ctx->rank = options->rank;
  ctx->shard = options->shard;
  ctx->threads = std::max<int64_t>(options->threads, 1);
  omp_set_num_threads(int(ctx->threads));
  return ctx;
}

int64_t strata_rt_step_begin(StrataRtContext *ctx, int64_t abiVersion) {
  if (abiVersion == STRATA_RT_ABI_VERSION)
    return 0;
  ctx->fail(-1, "the step was lowered for runtime ABI " +
                    std::to_string(abiVersion) +
                    "; this runtime implements ABI " +
                    std::to_string(STRATA_RT_ABI_VERSION) +
                    ": lower the program again with this release");
  return 1;
}

void strata_rt_step_end(StrataRtContext *ctx) {
  // The CPU runtime finishes every call before returning; a collective
  // still in flight means the step never waited for it.
  if (!ctx->pending.empty() && ctx->error.empty())
    ctx->fail(ctx->pending.begin()->first,
              std::string(ctx->pending.begin()->second.name) +
                  " was started but never waited for");
}

void strata_rt_destroy(StrataRtContext *ctx) { delete ctx; }

void strata_rt_set_collectives(StrataRtContext *ctx, StrataRtCollectiveFn run,
                               StrataRtWaitFn wait, void *user) {
  ctx->collective = run;
  ctx->wait = wait;
  ctx->collectiveUser = user;
}

const char *strata_rt_error(StrataRtContext *ctx, int64_t *site) {
  if (ctx->error.empty())
    return nullptr;
  if (site)
    *site = ctx->errorSite;
  return ctx->error.c_str();
}

void strata_rt_clear_error(StrataRtContext *ctx) {
  ctx->error.clear();
  ctx->errorSite = -1;
}

double strata_rt_now_us(StrataRtContext *ctx) {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now() - ctx->start)
      .count();
}

void strata_rt_enable_trace(StrataRtContext *ctx, int64_t enable) {
  ctx->tracing = enable != 0;
}

void strata_rt_trace_begin(StrataRtContext *ctx, int64_t site) {
  if (ctx->tracing)
    ctx->openBegin = strata_rt_now_us(ctx);
}

void strata_rt_trace_end(StrataRtContext *ctx, int64_t site) {
  if (ctx->tracing)
    ctx->trace.push_back({site, ctx->openBegin, strata_rt_now_us(ctx)});
}

const StrataRtTraceEvent *strata_rt_take_trace(StrataRtContext *ctx,
                                               size_t *count) {
  ctx->taken.swap(ctx->trace);
  ctx->trace.clear();
  *count = ctx->taken.size();
  return ctx->taken.data();
}

int64_t strata_rt_scratch_bytes(StrataRtContext *ctx) {
  return int64_t((ctx->scratch.capacity() + ctx->gemmScratch_.capacity() +
                  ctx->gemmWiden.capacity()) *
                 sizeof(float));
}

/// The list of `group` (count, then length + ranks per list) that holds
/// this rank.
static bool findGroup(StrataRtContext *ctx, int64_t site, const int64_t *group,
                      const int64_t *&ranks, int64_t &numRanks) {
  const int64_t *p = group + 1;
  for (int64_t l = 0; l < group[0]; ++l) {
    int64_t len = *p++;
    if (std::find(p, p + len, ctx->rank) != p + len) {
      ranks = p;
      numRanks = len;
      return true;
    }
    p += len;
  }
  ctx->fail(site, "rank " + std::to_string(ctx->rank) +
                      " is in no list of the collective's group");
  return false;
}

namespace {
/// Marks `site` as the host call in progress for as long as it lives.
struct HostCall {
  HostCall(StrataRtContext *ctx, int64_t site) : ctx(ctx) {
    ctx->activeSite.store(site, std::memory_order_relaxed);
  }
  ~HostCall() { ctx->activeSite.store(-1, std::memory_order_relaxed); }
  StrataRtContext *ctx;
};

const char *collectiveName(int64_t op) {
  switch (op) {
  case STRATA_RT_ALL_REDUCE:
    return "all_reduce";
  case STRATA_RT_BROADCAST:
    return "broadcast";
  case STRATA_RT_REDUCE_SCATTER:
    return "reduce_scatter";
  case STRATA_RT_ALL_GATHER:
    return "all_gather";
  }
  return "collective";
}

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

int64_t strata_rt_active_site(const StrataRtContext *ctx) {
  return ctx->activeSite.load(std::memory_order_relaxed);
}

void strata_rt_collective(StrataRtContext *ctx, int64_t site, int64_t op,
                          void *out, const void *in, int64_t dtype, int64_t n,
                          int64_t kind, int64_t root, const int64_t *group) {
  if (op < STRATA_RT_ALL_REDUCE || op > STRATA_RT_ALL_GATHER) {
    ctx->fail(site, "unknown collective " + std::to_string(op));
    return;
  }
  const char *name = collectiveName(op);
  // Sums are the host's (MPI, NCCL) on any type; the mean divides floats.
  if (strata_rt_element_bytes(dtype) == 0 ||
      (kind == 1 && dtype != STRATA_RT_F32 && dtype != STRATA_RT_BF16 &&
       dtype != STRATA_RT_F16))
    return unsupportedType(ctx, site, name, dtype);
  if (!ctx->collective) {
    ctx->fail(site, std::string(name) + " needs several ranks");
    return;
  }
  const int64_t *ranks = nullptr;
  int64_t numRanks = 0;
  if (!findGroup(ctx, site, group, ranks, numRanks))
    return;
  StrataRtCollective c{op, in, out, n, dtype, ranks, numRanks, root};
  switch (op) {
  case STRATA_RT_BROADCAST:
    if (root < 0 || root >= numRanks) {
      ctx->fail(site, "broadcast root " + std::to_string(root) +
                          " outside a group of " + std::to_string(numRanks));
      return;
    }
    [[fallthrough]];
  case STRATA_RT_ALL_REDUCE:
    // In place on the output.
    if (out != in)
      std::memcpy(out, in, n * strata_rt_element_bytes(dtype));
    c.send = out;
    break;
  case STRATA_RT_ALL_GATHER:
    if (n % numRanks != 0) {
      ctx->fail(site, "all_gather of " + std::to_string(n) +
                          " elements over " + std::to_string(numRanks) +
                          " ranks");
      return;
    }
    c.count = n / numRanks;
    break;
  }
  StrataRtContext::Pending p{nullptr, out, n, dtype,
                             kind == 1 && (op == STRATA_RT_ALL_REDUCE ||
                                           op == STRATA_RT_REDUCE_SCATTER),
                             numRanks, name};
  char error[256] = {0};
  HostCall inHost(ctx, site);
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
  HostCall inHost(ctx, site);
  if (ctx->wait(ctx->collectiveUser, p.request, error, sizeof(error)) != 0) {
    ctx->fail(site, error[0] ? error : std::string(p.name) + " failed");
    return;
  }
  finishMean(p);
}

void strata_rt_set_point_to_point(StrataRtContext *ctx, StrataRtSendFn send,
                                  StrataRtRecvFn recv, void *user) {
  ctx->send = send;
  ctx->recv = recv;
  ctx->p2pUser = user;
}

/// This rank's list of `group` and a valid peer in it.
static bool pointToPointPrologue(StrataRtContext *ctx, int64_t site,
                                 const void *fn, const int64_t *group,
                                 int64_t peer, const int64_t *&ranks,
                                 int64_t &numRanks) {
  if (!fn) {
    ctx->fail(site, "send and recv need several ranks");
    return false;
  }
  if (!findGroup(ctx, site, group, ranks, numRanks))
    return false;
  if (peer < 0 || peer >= numRanks || ranks[peer] == ctx->rank) {
    ctx->fail(site, "peer " + std::to_string(peer) +
                        " is not another rank of a group of " +
                        std::to_string(numRanks));
    return false;
  }
  return true;
}

void strata_rt_send(StrataRtContext *ctx, int64_t site, const void *in,
                    int64_t dtype, int64_t n, int64_t peer,
                    const int64_t *group) {
  const int64_t *ranks = nullptr;
  int64_t numRanks = 0;
  if (!pointToPointPrologue(ctx, site, (const void *)ctx->send, group, peer,
                            ranks, numRanks))
    return;
  char error[256] = {0};
  HostCall inHost(ctx, site);
  if (ctx->send(ctx->p2pUser, in, n, dtype, ranks, numRanks, peer, error,
                sizeof(error)) != 0)
    ctx->fail(site, error[0] ? error : "send failed");
}

void strata_rt_recv(StrataRtContext *ctx, int64_t site, void *out,
                    int64_t dtype, int64_t n, int64_t peer,
                    const int64_t *group) {
  const int64_t *ranks = nullptr;
  int64_t numRanks = 0;
  if (!pointToPointPrologue(ctx, site, (const void *)ctx->recv, group, peer,
                            ranks, numRanks))
    return;
  char error[256] = {0};
  HostCall inHost(ctx, site);
  if (ctx->recv(ctx->p2pUser, out, n, dtype, ranks, numRanks, peer, error,
                sizeof(error)) != 0)
    ctx->fail(site, error[0] ? error : "recv failed");
}

} // extern "C"
