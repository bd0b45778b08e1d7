//===- Host.cpp - The host functions every runtime shares -----------------===//
//
// Compiled into each runtime with that runtime's directory first on the
// include path: "Context.h" is its StrataRtContext, which derives from
// strata::rt::HostContext. What differs between backends (creating a
// context, the kernels, collectives, tracing) is in the backend's files.
//
//===----------------------------------------------------------------------===//

#include "Context.h"

#include <algorithm>
#include <cstddef>
#include <cstdio>

namespace strata::rt {

std::string checkOptions(const StrataRtOptions *options,
                         const char *backendName, int64_t devices) {
  if (!options)
    return "no options (fill them with strata_rt_default_options)";
  if (options->abiVersion != STRATA_RT_ABI_VERSION)
    return "the caller was built for runtime ABI " +
           std::to_string(options->abiVersion) +
           "; this runtime implements "
           "ABI " +
           std::to_string(STRATA_RT_ABI_VERSION);
  // Every field up to `device` exists in every version of the struct.
  if (!STRATA_RT_OPTION_GIVEN(options, device))
    return "options of " + std::to_string(options->size) +
           " bytes are too short (fill them with strata_rt_default_options)";
  if (options->device < -1 || options->device >= devices)
    return std::string("the ") + backendName + " has " +
           (devices == 1 ? "one device (0)"
                         : std::to_string(devices) + " devices") +
           "; device " + std::to_string(options->device) + " was asked for";
  if (options->rank < 0 || options->shard < 0)
    return "rank and shard must not be negative";
  return "";
}

StrataRtContext *refuse(const std::string &message, char *error,
                        size_t errorSize) {
  if (error && errorSize)
    std::snprintf(error, errorSize, "%s", message.c_str());
  return nullptr;
}

bool openUpdates(HostContext &ctx, int64_t site) {
  if (ctx.updatesSite >= 0) {
    ctx.fail(site, "strata_rt_updates_begin: the group of updates begun at "
                   "site " +
                       std::to_string(ctx.updatesSite) +
                       " is still open (groups do not nest)");
    return false;
  }
  ctx.updatesSite = site;
  return true;
}

bool closeUpdates(HostContext &ctx, int64_t site) {
  if (ctx.updatesSite != site) {
    ctx.fail(site, ctx.updatesSite < 0
                       ? std::string("strata_rt_updates_end: no group of "
                                     "updates is open")
                       : "strata_rt_updates_end: the open group of updates "
                         "was begun at site " +
                             std::to_string(ctx.updatesSite));
    ctx.updatesSite = -1;
    return false;
  }
  ctx.updatesSite = -1;
  return true;
}

void checkNoUpdatesOpen(HostContext &ctx) {
  if (ctx.updatesSite < 0)
    return;
  ctx.fail(ctx.updatesSite, "the group of updates begun here was never "
                            "ended (strata_rt_updates_end)");
  ctx.updatesSite = -1;
}

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

bool findGroup(HostContext &ctx, int64_t site, const int64_t *group,
               const int64_t *&ranks, int64_t &numRanks) {
  const int64_t *p = group + 1;
  for (int64_t l = 0; l < group[0]; ++l) {
    int64_t len = *p++;
    if (std::find(p, p + len, ctx.rank) != p + len) {
      ranks = p;
      numRanks = len;
      return true;
    }
    p += len;
  }
  ctx.fail(site, "rank " + std::to_string(ctx.rank) +
                     " is in no list of the collective's group");
  return false;
}

bool collectivePrologue(HostContext &ctx, int64_t site, int64_t op,
                        int64_t dtype, int64_t n, int64_t kind, int64_t root,
                        const int64_t *group, const char *&name,
                        const int64_t *&ranks, int64_t &numRanks) {
  if (op < STRATA_RT_ALL_REDUCE || op > STRATA_RT_ALL_GATHER) {
    ctx.fail(site, "unknown collective " + std::to_string(op));
    return false;
  }
  name = collectiveName(op);
  // Sums are the host's (MPI, NCCL) on any type; the mean divides floats.
  if (!collectiveType(&ctx, site, name, dtype, kind))
    return false;
  if (!ctx.collective) {
    ctx.fail(site, std::string(name) + " needs several ranks");
    return false;
  }
  if (!findGroup(ctx, site, group, ranks, numRanks))
    return false;
  if (op == STRATA_RT_BROADCAST && (root < 0 || root >= numRanks)) {
    ctx.fail(site, "broadcast root " + std::to_string(root) +
                       " outside a group of " + std::to_string(numRanks));
    return false;
  }
  if (op == STRATA_RT_ALL_GATHER && n % numRanks != 0) {
    ctx.fail(site, "all_gather of " + std::to_string(n) + " elements over " +
                       std::to_string(numRanks) + " ranks");
    return false;
  }
  return true;
}

bool pointToPointGroup(HostContext &ctx, int64_t site, const void *fn,
                       const int64_t *group, int64_t peer,
                       const int64_t *&ranks, int64_t &numRanks) {
  if (!fn) {
    ctx.fail(site, "send and recv need several ranks");
    return false;
  }
  if (!findGroup(ctx, site, group, ranks, numRanks))
    return false;
  if (peer < 0 || peer >= numRanks || ranks[peer] == ctx.rank) {
    ctx.fail(site, "peer " + std::to_string(peer) +
                       " is not another rank of a group of " +
                       std::to_string(numRanks));
    return false;
  }
  return true;
}

namespace {
/// connectHost's parsing of the plan.
bool connectionsOf(HostContext &ctx, int64_t site, const int64_t *plan,
                   std::vector<Connection> &connections) {
  connections.clear();
  const int64_t *p = plan + 1;
  for (int64_t c = 0; c < plan[0]; ++c) {
    Connection connection;
    connection.peer = *p++;
    const int64_t *group = p, *ranks = nullptr;
    int64_t numRanks = 0;
    // Past the group: its number of lists, then each list's length + ranks.
    p = group + 1;
    for (int64_t l = 0; l < group[0]; ++l)
      p += 1 + *p;
    if (connection.peer < 0) {
      if (!findGroup(ctx, site, group, ranks, numRanks))
        return false;
    } else {
      // Without the host's point-to-point functions the send or receive
      // itself reports it.
      if (!ctx.send)
        continue;
      if (!pointToPointGroup(ctx, site, (const void *)ctx.send, group,
                             connection.peer, ranks, numRanks))
        return false;
      connection.low = std::min(ctx.rank, ranks[connection.peer]);
      connection.high = std::max(ctx.rank, ranks[connection.peer]);
    }
    connection.ranks.assign(ranks, ranks + numRanks);
    connections.push_back(std::move(connection));
  }
  return true;
}

} // namespace

bool connectHost(HostContext &ctx, int64_t site, const int64_t *plan,
                 std::vector<Connection> &connections) {
  if (!ctx.collective || !connectionsOf(ctx, site, plan, connections))
    return false;
  std::set<std::vector<int64_t>> lists;
  for (const Connection &c : connections)
    if (!ctx.connectedLists.count(c.ranks))
      lists.insert(c.ranks);
  for (const std::vector<int64_t> &ranks : lists) {
    uint8_t byte = 0;
    if (!hostBroadcast(ctx, site, &byte, 1, ranks.data(), int64_t(ranks.size()),
                       "making the communicators"))
      return false;
    ctx.connectedLists.insert(ranks);
  }
  return true;
}

bool hostBroadcast(HostContext &ctx, int64_t site, void *data, int64_t bytes,
                   const int64_t *ranks, int64_t numRanks, const char *what) {
  StrataRtCollective c{STRATA_RT_BROADCAST, data,  data,     bytes,
                       STRATA_RT_U8,        ranks, numRanks, 0};
  char error[256] = {0};
  HostCall inHost(ctx, site);
  if (ctx.collective(ctx.collectiveUser, &c, nullptr, error, sizeof(error)) ==
      0)
    return true;
  ctx.fail(site, std::string(what) + ": " +
                     (error[0] ? error : "the host's broadcast failed"));
  return false;
}

void emptyProduct(StrataRtContext *ctx, int64_t site, int64_t rows, int64_t n,
                  void *c, int64_t cType, const void *bias, int64_t act,
                  int64_t accumulate) {
  if (accumulate)
    return;
  if (!bias)
    return strata_rt_fill(ctx, site, c, cType, rows * n, 0.0);
  // Every row the bias (input strides 0 and 1 over [rows, n], base 0).
  const int64_t desc[5] = {rows, n, 0, 1, 0};
  strata_rt_strided_copy(ctx, site, c, bias, cType, 2, desc);
  if (act != STRATA_RT_ACT_NONE)
    strata_rt_unary(ctx, site, act, c, cType, c, cType, rows * n, 0.0);
}

} // namespace strata::rt

extern "C" {

void strata_rt_default_options(StrataRtOptions *options) {
  *options = StrataRtOptions{};
  options->abiVersion = STRATA_RT_ABI_VERSION;
  options->size = sizeof(StrataRtOptions);
  options->threads = 1;
  options->device = -1;
  options->collectiveTimeout = 1800;
}

int64_t strata_rt_abi_version(void) { return STRATA_RT_ABI_VERSION; }

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

void strata_rt_set_collectives(StrataRtContext *ctx, StrataRtCollectiveFn run,
                               StrataRtWaitFn wait, void *user) {
  ctx->collective = run;
  ctx->wait = wait;
  ctx->collectiveUser = user;
}

void strata_rt_set_point_to_point(StrataRtContext *ctx, StrataRtSendFn send,
                                  StrataRtRecvFn recv, void *user) {
  ctx->send = send;
  ctx->recv = recv;
  ctx->p2pUser = user;
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

int64_t strata_rt_active_site(const StrataRtContext *ctx) {
  return ctx->activeSite.load(std::memory_order_relaxed);
}

double strata_rt_now_us(StrataRtContext *ctx) { return ctx->nowUs(); }

void strata_rt_enable_trace(StrataRtContext *ctx, int64_t enable) {
  ctx->tracing = enable != 0;
}

} // extern "C"
