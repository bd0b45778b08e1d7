//===- HostContext.h - The host side every runtime shares -------*- C++ -*-===//
//
// What every backend's context holds on the host: the RNG seed and this
// rank's shard, the host's collectives and point-to-point functions, the
// first error of a step, and the call site of the host call in progress.
// Each runtime's StrataRtContext derives from HostContext; Host.cpp,
// compiled into each runtime, implements the ABI's host functions on it,
// and the argument checks below word every backend's refusals alike.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_RUNTIME_COMMON_HOSTCONTEXT_H
#define STRATA_RUNTIME_COMMON_HOSTCONTEXT_H

#include "strata/Runtime/StrataRuntime.h"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace strata::rt {

struct HostContext {
  /// "CPU runtime", "CUDA runtime": how errors name the backend.
  const char *backendName;

  uint64_t seed = 0;
  int64_t rank = 0;
  int64_t shard = 0;

  StrataRtCollectiveFn collective = nullptr;
  StrataRtWaitFn wait = nullptr;
  void *collectiveUser = nullptr;
  StrataRtSendFn send = nullptr;
  StrataRtRecvFn recv = nullptr;
  void *p2pUser = nullptr;
  /// The site of the host call (collective, send, receive, wait) in
  /// progress, or -1: what a signal handler reports when the job is stopped.
  std::atomic<int64_t> activeSite{-1};

  bool tracing = false;
  std::chrono::steady_clock::time_point start =
      std::chrono::steady_clock::now();
  std::vector<StrataRtTraceEvent> trace, taken;

  std::string error;
  int64_t errorSite = -1;

  /// The rank lists whose host communicators strata_rt_connect has made.
  std::set<std::vector<int64_t>> connectedLists;

  /// The site of the open group of updates (strata_rt_updates_begin), or
  /// -1.
  int64_t updatesSite = -1;

  explicit HostContext(const char *backendName) : backendName(backendName) {}

  /// Records the first failure of a step.
  void fail(int64_t site, std::string message) {
    if (errorSite < 0 && error.empty()) {
      error = std::move(message);
      errorSite = site;
    }
  }
  /// Microseconds since the context was created.
  double nowUs() const {
    return std::chrono::duration<double, std::micro>(
               std::chrono::steady_clock::now() - start)
        .count();
  }
};

/// Whether the caller's StrataRtOptions (`options->size` bytes) include
/// `field`: fields are only appended, so an older caller's struct ends
/// before the newer ones, which then keep their defaults.
#define STRATA_RT_OPTION_GIVEN(options, field)                                 \
  ((options)->size >=                                                          \
   int64_t(offsetof(StrataRtOptions, field) + sizeof((options)->field)))

/// Why `options` cannot make a context of a backend with `devices` devices
/// (the empty string when they can).
std::string checkOptions(const StrataRtOptions *options,
                         const char *backendName, int64_t devices);
/// Copies `message` into the caller's error buffer; returns null.
StrataRtContext *refuse(const std::string &message, char *error,
                        size_t errorSize);

/// strata_rt_updates_begin's and _end's checks (no group open; the open
/// group's site), recording why not; a step's end checks that none is
/// open (and closes it).
bool openUpdates(HostContext &ctx, int64_t site);
bool closeUpdates(HostContext &ctx, int64_t site);
void checkNoUpdatesOpen(HostContext &ctx);

/// "all_reduce", "broadcast", ...
const char *collectiveName(int64_t op);
/// The list of `group` (count, then length + ranks per list) that holds
/// this rank; records the failure when none does.
bool findGroup(HostContext &ctx, int64_t site, const int64_t *group,
               const int64_t *&ranks, int64_t &numRanks);
/// The checks every backend makes before collective `op`: a known op and
/// element type, the host's functions, this rank's list of `group`, a root
/// in it (broadcast), a count that splits over it (all_gather). Sets the
/// op's `name` and the list; records why not.
bool collectivePrologue(HostContext &ctx, int64_t site, int64_t op,
                        int64_t dtype, int64_t n, int64_t kind, int64_t root,
                        const int64_t *group, const char *&name,
                        const int64_t *&ranks, int64_t &numRanks);
/// This rank's list of `group` and a valid other `peer` in it, for send and
/// receive through `fn` (records why not).
bool pointToPointGroup(HostContext &ctx, int64_t site, const void *fn,
                       const int64_t *group, int64_t peer,
                       const int64_t *&ranks, int64_t &numRanks);

/// A communicator strata_rt_connect makes: this rank's list of a group and,
/// for a point-to-point link, the peer's index in it (-1 for a collective
/// group).
struct Connection {
  std::vector<int64_t> ranks;
  int64_t peer = -1;
  /// A link's two world ranks, the lower first.
  int64_t low = -1, high = -1;
};
/// Broadcasts `bytes` bytes at `data` from the first rank of `ranks` to the
/// others through the host's collective, completed before it returns;
/// records "<what>: <the host's error>" at `site` when it fails.
bool hostBroadcast(HostContext &ctx, int64_t site, void *data, int64_t bytes,
                   const int64_t *ranks, int64_t numRanks, const char *what);
/// The links of `connections`' sends and receives in the order every rank
/// makes them: by rank pair (lower rank first), sorted; for each, the
/// connection whose list carries the link's bootstrap, the first in sorted
/// order of the lists that hold both ranks (the two ranks pick the same
/// one: each one's sends are the other's receives, through the same
/// groups).
inline std::vector<const Connection *>
linksOf(const std::vector<Connection> &connections) {
  std::map<std::pair<int64_t, int64_t>, const Connection *> pairs;
  for (const Connection &c : connections) {
    if (c.peer < 0)
      continue;
    auto [it, made] = pairs.emplace(std::make_pair(c.low, c.high), &c);
    if (!made && c.ranks < it->second->ranks)
      it->second = &c;
  }
  std::vector<const Connection *> links;
  for (const auto &entry : pairs)
    links.push_back(entry.second);
  return links;
}
/// strata_rt_connect's part on the host, every runtime's: sets
/// `connections` from `plan` (their number, then per connection the peer
/// index or -1 and the group: its number of lists, then each list's length
/// and ranks), this rank's lists taken from each group and checked as a
/// collective or send does; then makes the host's communicator of every
/// list not yet made, in one order every rank agrees on (sorted lists): a
/// one-byte broadcast over each, which a host that makes its communicators
/// on first use (MPI) makes then. Every rank making its communicators in the
/// same global order cannot deadlock: the first list still missing is every
/// one of its members' next. False (nothing to make) without the host's
/// collectives, and with the failure recorded.
bool connectHost(HostContext &ctx, int64_t site, const int64_t *plan,
                 std::vector<Connection> &connections);

/// Marks `site` as the host call in progress for as long as it lives.
struct HostCall {
  HostCall(HostContext &ctx, int64_t site) : ctx(ctx) {
    ctx.activeSite.store(site, std::memory_order_relaxed);
  }
  ~HostCall() { ctx.activeSite.store(-1, std::memory_order_relaxed); }
  HostContext &ctx;
};

/// Records that kernel `kernel` has no implementation for `dtype`.
inline void unsupportedType(HostContext *ctx, int64_t site, const char *kernel,
                            int64_t dtype) {
  const char *name = strata_rt_element_name(dtype);
  ctx->fail(site,
            std::string("strata_rt_") + kernel + ": " +
                (std::string(name) == "unknown"
                     ? "unknown element type code " + std::to_string(dtype)
                     : std::string(name) + " tensors") +
                " are not implemented by the " + ctx->backendName);
}

/// Whether every tensor of a kernel that implements f32 alone (the
/// optimizer updates: master weights and moments are f32) is f32; records
/// the failure otherwise.
inline bool onlyF32(HostContext *ctx, int64_t site, const char *kernel,
                    std::initializer_list<int64_t> types) {
  for (int64_t t : types)
    if (t != STRATA_RT_F32) {
      unsupportedType(ctx, site, kernel, t);
      return false;
    }
  return true;
}

/// Whether strata_rt_binary's `op` is one the kernels take for tensors of
/// `dtype`: integer division is refused (a zero divisor would trap on the
/// CPU and give garbage on a GPU; the dialect divides floating-point
/// tensors only); records the failure otherwise.
inline bool binaryOpOk(HostContext *ctx, int64_t site, int64_t op,
                       int64_t dtype) {
  if (op != STRATA_RT_ADD && op != STRATA_RT_SUB && op != STRATA_RT_MUL &&
      op != STRATA_RT_DIV) {
    ctx->fail(site, "unknown binary op code " + std::to_string(op));
    return false;
  }
  if (op == STRATA_RT_DIV &&
      (dtype == STRATA_RT_I32 || dtype == STRATA_RT_I64)) {
    ctx->fail(site, "strata_rt_binary: integer division is not implemented "
                    "(the division of floating-point tensors is)");
    return false;
  }
  return true;
}

/// Whether a causal attention's shape is one the kernels take: no more
/// queries than keys (query i sees keys 0 .. i); records the failure
/// otherwise. (The dialect's causal attention has as many of each.)
inline bool causalShapeOk(HostContext *ctx, int64_t site, const char *kernel,
                          int64_t causal, int64_t s, int64_t t) {
  if (!causal || s <= t)
    return true;
  ctx->fail(site, "strata_rt_" + std::string(kernel) +
                      ": causal attention with more queries than keys (s = " +
                      std::to_string(s) + ", t = " + std::to_string(t) + ")");
  return false;
}

/// Whether attention's key and value heads are a divisor of its query heads
/// (grouped-query attention) or all of them (none of none: no slice);
/// records the failure otherwise.
inline bool kvHeadsOk(HostContext *ctx, int64_t site, const char *kernel,
                      int64_t heads, int64_t kvHeads) {
  if ((kvHeads >= 1 && kvHeads <= heads && heads % kvHeads == 0) ||
      (heads == 0 && kvHeads == 0))
    return true;
  ctx->fail(site, "strata_rt_" + std::string(kernel) + ": " +
                      std::to_string(kvHeads) +
                      " key and value heads do not divide the " +
                      std::to_string(heads) + " query heads");
  return false;
}

/// Whether `dtype`, an argument's type, keeps `rule` (`ok`); otherwise
/// records "strata_rt_KERNEL: RULE, not TYPE".
inline bool typeKeeps(HostContext *ctx, int64_t site, const char *kernel,
                      bool ok, const char *rule, int64_t dtype) {
  if (ok)
    return true;
  ctx->fail(site, std::string("strata_rt_") + kernel + ": " + rule + ", not " +
                      strata_rt_element_name(dtype));
  return false;
}

/// Whether a loss (or its gradient) of type `lossType` is f32, the type of
/// every loss whatever its inputs' type; records the failure otherwise.
inline bool lossIsF32(HostContext *ctx, int64_t site, const char *kernel,
                      int64_t lossType) {
  return typeKeeps(ctx, site, kernel, lossType == STRATA_RT_F32,
                   "the loss and its gradient are f32", lossType);
}

/// Whether all `types` are equal (elementwise kernels do not convert).
inline bool sameTypes(HostContext *ctx, int64_t site, const char *kernel,
                      std::initializer_list<int64_t> types) {
  for (int64_t t : types)
    if (t != *types.begin()) {
      ctx->fail(site, std::string("strata_rt_") + kernel + ": mixes " +
                          strata_rt_element_name(*types.begin()) + " and " +
                          strata_rt_element_name(t) + " tensors");
      return false;
    }
  return true;
}

/// Ids and labels are i32 or i64.
inline bool integerIds(HostContext *ctx, int64_t site, const char *kernel,
                       int64_t dtype) {
  return typeKeeps(ctx, site, kernel,
                   dtype == STRATA_RT_I32 || dtype == STRATA_RT_I64,
                   "ids are i32 or i64", dtype);
}

/// Whether `op` is a code strata_rt_unary (and a GEMM's activation) knows.
inline bool knownUnary(int64_t op) {
  switch (op) {
  case STRATA_RT_UNARY_SCALE:
  case STRATA_RT_ACT_RELU:
  case STRATA_RT_ACT_GELU_TANH:
  case STRATA_RT_ACT_GELU_ERF:
  case STRATA_RT_ACT_SILU:
  case STRATA_RT_UNARY_RSQRT:
  case STRATA_RT_UNARY_TANH:
  case STRATA_RT_ACT_NONE:
    return true;
  }
  return false;
}

/// Whether `act` is an activation strata_rt_act_grad knows.
inline bool knownActGrad(int64_t act) {
  return act == STRATA_RT_ACT_RELU || act == STRATA_RT_ACT_GELU_TANH ||
         act == STRATA_RT_ACT_GELU_ERF || act == STRATA_RT_ACT_SILU ||
         act == STRATA_RT_ACT_NONE;
}

/// Whether a cross-entropy's rows of `width` elements hold `vocab` classes
/// (1 <= vocab <= width: the rest is padding).
inline bool crossEntropyWidthOk(HostContext *ctx, int64_t site,
                                const char *kernel, int64_t vocab,
                                int64_t width) {
  if (vocab >= 1 && vocab <= width)
    return true;
  ctx->fail(site, std::string("strata_rt_") + kernel + ": " +
                      std::to_string(vocab) + " classes in rows of " +
                      std::to_string(width) +
                      " elements (1 <= classes <= width)");
  return false;
}

/// The step counter is an i64 scalar.
inline bool stepCounter(HostContext *ctx, int64_t site, const char *kernel,
                        int64_t dtype) {
  return typeKeeps(ctx, site, kernel, dtype == STRATA_RT_I64,
                   "the step counter is i64", dtype);
}

/// What an optimizer update computes from: every tensor f32 (`Plain`), or
/// a bf16 / f16 parameter updated from its f32 master weight, whose
/// gradient has the parameter's type or f32 (`Master`); `Refused` when the
/// types are neither (the failure recorded).
enum class UpdateKind { Refused, Plain, Master };
inline UpdateKind updateKind(HostContext *ctx, int64_t site, const char *kernel,
                             int64_t newParamType, int64_t paramType,
                             int64_t gradType, const void *newMaster,
                             int64_t newMasterType, const void *master,
                             int64_t masterType) {
  if (!master && !newMaster)
    return onlyF32(ctx, site, kernel, {newParamType, paramType, gradType})
               ? UpdateKind::Plain
               : UpdateKind::Refused;
  if (!master || !newMaster) {
    ctx->fail(site, std::string("strata_rt_") + kernel +
                        ": a master weight needs both its value and its new "
                        "value");
    return UpdateKind::Refused;
  }
  if (!onlyF32(ctx, site, kernel, {newMasterType, masterType}))
    return UpdateKind::Refused;
  if ((paramType != STRATA_RT_BF16 && paramType != STRATA_RT_F16) ||
      newParamType != paramType ||
      (gradType != paramType && gradType != STRATA_RT_F32)) {
    ctx->fail(site, std::string("strata_rt_") + kernel +
                        ": a master weight updates a bf16 or f16 "
                        "parameter, whose gradient has its type or f32");
    return UpdateKind::Refused;
  }
  return UpdateKind::Master;
}

/// Whether a mean over ranks (kind 1) of `dtype` is defined and the type is
/// known; records the failure otherwise.
inline bool collectiveType(HostContext *ctx, int64_t site, const char *name,
                           int64_t dtype, int64_t kind) {
  if (strata_rt_element_bytes(dtype) == 0 ||
      (kind == 1 && dtype != STRATA_RT_F32 && dtype != STRATA_RT_BF16 &&
       dtype != STRATA_RT_F16)) {
    unsupportedType(ctx, site, name, dtype);
    return false;
  }
  return true;
}

/// Calls `f(T{})` with a runtime's storage type of a floating-point ABI type
/// code (float for f32, BF16 for bf16, F16 for f16); false for other codes.
template <typename BF16, typename F16, typename F>
bool withStorageType(int64_t dtype, F &&f) {
  switch (dtype) {
  case STRATA_RT_F32:
    f(float{});
    return true;
  case STRATA_RT_BF16:
    f(BF16{});
    return true;
  case STRATA_RT_F16:
    f(F16{});
    return true;
  }
  return false;
}

/// withStorageType for a kernel whose tensors all share one type (it
/// computes in f32); records the failure otherwise (mixed types, or a type
/// without kernels).
template <typename BF16, typename F16, typename F>
bool withSameStorageType(HostContext *ctx, int64_t site, const char *kernel,
                         std::initializer_list<int64_t> types, F &&f) {
  if (!sameTypes(ctx, site, kernel, types))
    return false;
  if (withStorageType<BF16, F16>(*types.begin(), f))
    return true;
  unsupportedType(ctx, site, kernel, *types.begin());
  return false;
}

/// Whether a GEMM's sizes and epilogue are ones the runtimes take: no
/// negative size, an epilogue activation of strata_rt_gemm's (none, ReLU,
/// GELU), and an accumulating product (C += op(A) op(B)) with no bias or
/// activation (the ABI's contract; the lowering accumulates plain products
/// only); records the failure otherwise.
inline bool gemmArgumentsOk(HostContext *ctx, int64_t site, const char *kernel,
                            int64_t batch, int64_t m, int64_t n, int64_t k,
                            bool bias, int64_t act, int64_t accumulate) {
  if (batch < 0 || m < 0 || n < 0 || k < 0) {
    ctx->fail(site, "strata_rt_" + std::string(kernel) +
                        ": negative sizes (batch, m, n, k = " +
                        std::to_string(batch) + ", " + std::to_string(m) +
                        ", " + std::to_string(n) + ", " + std::to_string(k) +
                        ")");
    return false;
  }
  if (act != STRATA_RT_ACT_NONE && act != STRATA_RT_ACT_RELU &&
      act != STRATA_RT_ACT_GELU_TANH && act != STRATA_RT_ACT_GELU_ERF) {
    ctx->fail(site,
              "unknown GEMM epilogue activation code " + std::to_string(act));
    return false;
  }
  if (accumulate && (bias || act != STRATA_RT_ACT_NONE)) {
    ctx->fail(site, "strata_rt_" + std::string(kernel) +
                        ": an accumulating GEMM takes no bias or activation");
    return false;
  }
  return true;
}

/// strata_rt_gemm of an empty inner dimension (k = 0), which the GEMM
/// libraries do not all take: the product is zero, so C is act(bias) in
/// every row, zero without a bias, and unchanged when accumulating. Through
/// the runtime's own fill, strided copy and unary kernels.
void emptyProduct(StrataRtContext *ctx, int64_t site, int64_t rows, int64_t n,
                  void *c, int64_t cType, const void *bias, int64_t act,
                  int64_t accumulate);

/// strata_rt_reduce's `desc` (rank 2) for strata_rt_gemm_bgrad's bias
/// gradient: op(A) [m, k] (`operand` 0) or op(B) [k, n] (1) summed over k,
/// as the operand is stored (transposed or not).
inline void bgradReduction(int64_t m, int64_t n, int64_t k, bool transA,
                           bool transB, int64_t operand, int64_t desc[4]) {
  // Stored [k, len]: sum over rows; stored [len, k]: over columns.
  bool kRows = operand == 0 ? transA : !transB;
  int64_t len = operand == 0 ? m : n;
  desc[0] = kRows ? k : len;
  desc[1] = kRows ? len : k;
  desc[2] = kRows ? 0 : 1;
  desc[3] = kRows ? 1 : 0;
}

} // namespace strata::rt

#endif // STRATA_RUNTIME_COMMON_HOSTCONTEXT_H
