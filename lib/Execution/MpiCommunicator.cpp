//===- MpiCommunicator.cpp - A job's communication over MPI ---------------===//

#include "strata/Execution/MpiCommunicator.h"

#include "../../runtime/common/LowPrecision.h"

#include "llvm/ADT/Twine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <unistd.h>

using namespace llvm;

namespace strata {

namespace {
/// The outermost waiting call's start (0: none) and limit (seconds; 0: for
/// ever).
std::atomic<int64_t> blockedSince{0};
std::atomic<double> blockedLimit{0.0};

int64_t steadyNowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

} // namespace

MpiCommunicator::Waiting::Waiting(double limit)
    : outer(blockedSince.load()), outerLimit(blockedLimit.load()) {
  if (!outer) {
    blockedLimit.store(limit);
    blockedSince.store(steadyNowUs());
  }
}
MpiCommunicator::Waiting::~Waiting() {
  blockedSince.store(outer);
  blockedLimit.store(outerLimit);
}

void MpiCommunicator::watchBlockedCalls(
    std::function<void(double waited)> report) {
  static std::once_flag started;
  std::call_once(started, [&] {
    std::thread([report = std::move(report)] {
      while (true) {
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
        const int64_t since = blockedSince.load();
        const double limit = blockedLimit.load();
        // (The limit read belongs to the call that started at `since`
        // unless another began in between.)
        if (!since || limit <= 0 || blockedSince.load() != since)
          continue;
        double waited = double(steadyNowUs() - since) / 1e6;
        if (waited < limit)
          continue;
        report(waited);
        _exit(1);
      }
    }).detach();
  });
}

static Error mpiError(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
}

/// Sums of bf16 and f16 words (MPI has none): each pair added in f32 and
/// rounded to nearest even, as the runtime stores them.
template <typename T>
static void sumLowPrecision(void *in, void *inout, int *len, MPI_Datatype *) {
  auto *a = static_cast<const T *>(in);
  auto *b = static_cast<T *>(inout);
  for (int i = 0; i < *len; ++i)
    b[i] = T(float(a[i]) + float(b[i]));
}
/// MPI's sum for `dtype`: MPI_SUM, or the operation made once for bf16 and
/// f16 (kept for the process's life).
static MPI_Op sumOf(int64_t dtype) {
  if (dtype == STRATA_RT_BF16 || dtype == STRATA_RT_F16) {
    static MPI_Op bf16 = [] {
      MPI_Op op;
      MPI_Op_create(&sumLowPrecision<strata::cpu::BFloat16>, /*commute=*/1,
                    &op);
      return op;
    }();
    static MPI_Op f16 = [] {
      MPI_Op op;
      MPI_Op_create(&sumLowPrecision<strata::cpu::Half>, /*commute=*/1, &op);
      return op;
    }();
    return dtype == STRATA_RT_BF16 ? bf16 : f16;
  }
  return MPI_SUM;
}

/// The MPI datatype of a runtime element type. bf16 and f16 move as 16-bit
/// words (their sums are sumOf's operations).
static MPI_Datatype mpiType(int64_t dtype) {
  switch (dtype) {
  case STRATA_RT_F32:
    return MPI_FLOAT;
  case STRATA_RT_I32:
    return MPI_INT32_T;
  case STRATA_RT_I64:
    return MPI_INT64_T;
  case STRATA_RT_I8:
    return MPI_INT8_T;
  case STRATA_RT_U8:
    return MPI_UINT8_T;
  case STRATA_RT_BF16:
  case STRATA_RT_F16:
    return MPI_UINT16_T;
  default:
    return MPI_DATATYPE_NULL;
  }
}

/// Open MPI runs MPI_Iallreduce through libnbc, whose default for fewer
/// than four ranks, or for an in-place sum (Strata's are), is a binomial
/// tree: every rank's vector is summed on one rank and sent back, so one
/// rank does all the additions while the other waits. Rabenseifner's
/// algorithm (reduce-scatter, then all-gather; what Open MPI's blocking
/// MPI_Allreduce picks for large vectors) shares them. This selects it for
/// Strata's own non-blocking all-reduces only: the setting (the MPI_T control
/// variable `coll_libnbc_iallreduce_algorithm`) is restored after each call,
/// so a framework that embeds Strata keeps its own. A user's choice
/// (OMPI_MCA_coll_libnbc_iallreduce_algorithm, or an mpirun --mca option) is
/// left alone, and so is an MPI without this variable.
class MpiCommunicator::IallreduceAlgorithm {
public:
  static std::unique_ptr<IallreduceAlgorithm> ifDefault() {
    if (std::getenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm"))
      return nullptr;
    int provided = 0, index = 0, count = 0;
    if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS)
      return nullptr;
    std::unique_ptr<IallreduceAlgorithm> self(new IallreduceAlgorithm);
    if (MPI_T_cvar_get_index("coll_libnbc_iallreduce_algorithm", &index) !=
            MPI_SUCCESS ||
        MPI_T_cvar_handle_alloc(index, nullptr, &self->handle, &count) !=
            MPI_SUCCESS ||
        count != 1)
      return nullptr;
    // 0 is "ignore" (libnbc's own choice): anything else was chosen.
    if (MPI_T_cvar_read(self->handle, &self->previous) != MPI_SUCCESS ||
        self->previous != 0)
      return nullptr;
    return self;
  }
  ~IallreduceAlgorithm() {
    if (handle != MPI_T_CVAR_HANDLE_NULL)
      MPI_T_cvar_handle_free(&handle);
    MPI_T_finalize();
  }
  /// Runs `call` with Rabenseifner's algorithm selected.
  template <typename Fn> int with(Fn call) {
    int rabenseifner = 3;
    MPI_T_cvar_write(handle, &rabenseifner);
    int status = call();
    MPI_T_cvar_write(handle, &previous);
    return status;
  }

private:
  IallreduceAlgorithm() = default;
  MPI_T_cvar_handle handle = MPI_T_CVAR_HANDLE_NULL;
  int previous = 0;
};

MpiCommunicator::MpiCommunicator(MPI_Comm comm)
    : iallreduceAlgorithm(IallreduceAlgorithm::ifDefault()), comm(comm) {
  MPI_Comm_rank(comm, &myRank);
  MPI_Comm_size(comm, &worldSize);
}

MpiCommunicator::~MpiCommunicator() {
  // (After MPI_Finalize, MPI has released them and may not be called.)
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized)
    for (auto &entry : comms)
      MPI_Comm_free(&entry.second);
}

Expected<MPI_Comm> MpiCommunicator::communicatorOf(ArrayRef<int64_t> group) {
  if (onBegin)
    onBegin(nullptr);
  return lookupOrCreate(group);
}

Expected<MPI_Comm> MpiCommunicator::lookupOrCreate(ArrayRef<int64_t> group) {
  bool whole = int64_t(group.size()) == worldSize;
  for (int64_t i = 0; whole && i < worldSize; ++i)
    whole = group[i] == i;
  if (whole)
    return comm;
  std::vector<int> ranks(group.begin(), group.end());
  auto it = comms.find(ranks);
  if (it == comms.end()) {
    MPI_Group all, sub;
    MPI_Comm_group(comm, &all);
    MPI_Group_incl(all, int(ranks.size()), ranks.data(), &sub);
    MPI_Comm created;
    Waiting waiting(waitLimit);
    int status = MPI_Comm_create_group(comm, sub, 0, &created);
    MPI_Group_free(&sub);
    MPI_Group_free(&all);
    if (status != MPI_SUCCESS)
      return mpiError("cannot create a communicator");
    it = comms.emplace(ranks, created).first;
  }
  return it->second;
}

Error MpiCommunicator::prepareGroups(ArrayRef<std::vector<int64_t>> groups) {
  if (onBegin)
    onBegin("setting up the communicators of the program's groups");
  for (const std::vector<int64_t> &group : groups)
    if (Expected<MPI_Comm> sub = lookupOrCreate(group); !sub) {
      if (onEnd)
        onEnd();
      return sub.takeError();
    }
  if (onEnd)
    onEnd();
  return Error::success();
}

/// Names a host-side exchange (the reference backend's collectives, sends
/// and receives, which no executable site names) for as long as it lasts.
class MpiCommunicator::Exchange {
  const MpiCommunicator &c;

public:
  Exchange(const MpiCommunicator &c, const char *what) : c(c) {
    if (c.onBegin)
      c.onBegin(what);
  }
  ~Exchange() {
    if (c.onEnd)
      c.onEnd();
  }
};

Error MpiCommunicator::allReduceSum(std::vector<double> &data,
                                    ArrayRef<int64_t> group) {
  Exchange exchange(*this, "an all-reduce of the reference backend");
  auto sub = communicatorOf(group);
  if (!sub)
    return sub.takeError();
  Waiting waiting(waitLimit);
  if (MPI_Allreduce(MPI_IN_PLACE, data.data(), int(data.size()), MPI_DOUBLE,
                    MPI_SUM, *sub) != MPI_SUCCESS)
    return mpiError("MPI_Allreduce failed");
  return Error::success();
}

Error MpiCommunicator::broadcast(std::vector<double> &data,
                                 ArrayRef<int64_t> group, int64_t root) {
  Exchange exchange(*this, "a broadcast of the reference backend");
  auto sub = communicatorOf(group);
  if (!sub)
    return sub.takeError();
  Waiting waiting(waitLimit);
  if (MPI_Bcast(data.data(), int(data.size()), MPI_DOUBLE, int(root), *sub) !=
      MPI_SUCCESS)
    return mpiError("MPI_Bcast failed");
  return Error::success();
}

Error MpiCommunicator::send(const std::vector<double> &data,
                            ArrayRef<int64_t> group, int64_t peer) {
  return send(data.data(), int64_t(data.size()), MPI_DOUBLE, group, peer);
}

Error MpiCommunicator::recv(std::vector<double> &data, ArrayRef<int64_t> group,
                            int64_t peer) {
  Exchange exchange(*this, "a receive of the reference backend");
  return recv(data.data(), int64_t(data.size()), MPI_DOUBLE, group, peer);
}

Error MpiCommunicator::send(const void *data, int64_t count, MPI_Datatype type,
                            ArrayRef<int64_t> group, int64_t peer) {
  auto sub = communicatorOf(group);
  if (!sub)
    return sub.takeError();
  int size = 0;
  MPI_Type_size(type, &size);
  auto message = std::make_unique<Outgoing>();
  message->bytes.assign(static_cast<const char *>(data),
                        static_cast<const char *>(data) + count * size);
  if (MPI_Isend(message->bytes.data(), int(count), type, int(peer),
                /*tag=*/0, *sub, &message->request) != MPI_SUCCESS)
    return mpiError("MPI_Isend to rank " + Twine(group[peer]) + " failed");
  outgoing.push_back(std::move(message));
  return Error::success();
}

Error MpiCommunicator::recv(void *data, int64_t count, MPI_Datatype type,
                            ArrayRef<int64_t> group, int64_t peer) {
  auto sub = communicatorOf(group);
  if (!sub)
    return sub.takeError();
  MPI_Status status;
  auto begin = std::chrono::steady_clock::now();
  Waiting waiting(waitLimit);
  int result =
      MPI_Recv(data, int(count), type, int(peer), /*tag=*/0, *sub, &status);
  recvWaitMs += std::chrono::duration<double, std::milli>(
                    std::chrono::steady_clock::now() - begin)
                    .count();
  if (result != MPI_SUCCESS)
    return mpiError("MPI_Recv from rank " + Twine(group[peer]) + " failed");
  int received = 0;
  MPI_Get_count(&status, type, &received);
  if (received != count)
    return mpiError("received " + Twine(received) + " elements from rank " +
                    Twine(group[peer]) + ", expected " + Twine(count));
  return Error::success();
}

Error MpiCommunicator::flush() {
  if (onBegin)
    onBegin("completing the step's sends (MPI_Wait)");
  Waiting waiting(waitLimit);
  Error result = Error::success();
  for (std::unique_ptr<Outgoing> &message : outgoing)
    if (MPI_Wait(&message->request, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      result = mpiError("MPI_Wait on a send failed");
      break;
    }
  outgoing.clear();
  if (onEnd)
    onEnd();
  return result;
}

int64_t MpiCommunicator::firstFailure(bool ok) {
  Waiting waiting(waitLimit);
  int mine = ok ? worldSize : myRank, first = worldSize;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
  return first == worldSize ? -1 : first;
}

int64_t MpiCommunicator::firstDifferent(uint64_t value) {
  uint64_t first = value;
  Waiting waiting(waitLimit);
  MPI_Bcast(&first, 1, MPI_UINT64_T, 0, comm);
  return firstFailure(value == first);
}

std::vector<std::string> MpiCommunicator::gatherBytes(const std::string &mine,
                                                      const char *what) {
  if (onBegin)
    onBegin(what);
  int size = int(mine.size());
  std::vector<int> sizes(worldSize), offsets(worldSize, 0);
  Waiting waiting(waitLimit);
  MPI_Gather(&size, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, comm);
  int total = 0;
  for (int r = 0; r < worldSize; ++r) {
    offsets[r] = total;
    total += sizes[r];
  }
  std::string joined(myRank == 0 ? total : 0, '\0');
  MPI_Gatherv(mine.data(), size, MPI_CHAR, joined.data(), sizes.data(),
              offsets.data(), MPI_CHAR, 0, comm);
  std::vector<std::string> all;
  if (myRank == 0)
    for (int r = 0; r < worldSize; ++r)
      all.push_back(joined.substr(offsets[r], sizes[r]));
  if (onEnd)
    onEnd();
  return all;
}

RuntimeCallbacks MpiCommunicator::runtimeCallbacks(bool asynchronous) {
  RuntimeCallbacks callbacks;
  callbacks.collective = &runtimeCollective;
  if (asynchronous)
    callbacks.wait = &runtimeWait;
  callbacks.collectiveUser = this;
  callbacks.send = &runtimeSend;
  callbacks.recv = &runtimeRecv;
  callbacks.pointToPointUser = this;
  return callbacks;
}

/// Reports `message` through the runtime's error buffer.
static int runtimeError(char *error, size_t errorSize, const Twine &message) {
  std::snprintf(error, errorSize, "%s", message.str().c_str());
  return 1;
}

int MpiCommunicator::runtimeSend(void *user, const void *data, int64_t count,
                                 int64_t dtype, const int64_t *ranks,
                                 int64_t numRanks, int64_t peer, char *error,
                                 size_t errorSize) {
  auto *self = static_cast<MpiCommunicator *>(user);
  MPI_Datatype type = mpiType(dtype);
  if (type == MPI_DATATYPE_NULL)
    return runtimeError(error, errorSize,
                        "cannot send element type code " + Twine(dtype));
  if (Error err = self->send(data, count, type,
                             ArrayRef<int64_t>(ranks, numRanks), peer))
    return runtimeError(error, errorSize, toString(std::move(err)));
  return 0;
}

int MpiCommunicator::runtimeRecv(void *user, void *data, int64_t count,
                                 int64_t dtype, const int64_t *ranks,
                                 int64_t numRanks, int64_t peer, char *error,
                                 size_t errorSize) {
  auto *self = static_cast<MpiCommunicator *>(user);
  MPI_Datatype type = mpiType(dtype);
  if (type == MPI_DATATYPE_NULL)
    return runtimeError(error, errorSize,
                        "cannot receive element type code " + Twine(dtype));
  if (Error err = self->recv(data, count, type,
                             ArrayRef<int64_t>(ranks, numRanks), peer))
    return runtimeError(error, errorSize, toString(std::move(err)));
  return 0;
}

/// Collectives are blocking, or started (MPI_I*) with a heap-allocated
/// MPI_Request that runtimeWait completes.
int MpiCommunicator::runtimeCollective(void *user, const StrataRtCollective *c,
                                       void **request, char *error,
                                       size_t errorSize) {
  auto *self = static_cast<MpiCommunicator *>(user);
  auto sub = self->communicatorOf(ArrayRef<int64_t>(c->ranks, c->numRanks));
  if (!sub)
    return runtimeError(error, errorSize, toString(sub.takeError()));
  MPI_Datatype type = mpiType(c->dtype);
  if (type == MPI_DATATYPE_NULL)
    return runtimeError(error, errorSize,
                        Twine("the MPI communicator cannot move ") +
                            strata_rt_element_name(c->dtype) + " tensors");
  MPI_Op sum = sumOf(c->dtype);
  int count = int(c->count);
  MPI_Request *r = request ? new MPI_Request : nullptr;
  int status = MPI_SUCCESS;
  Waiting waiting(self->waitLimit);
  const char *call = "";
  switch (c->op) {
  case STRATA_RT_ALL_REDUCE:
    call = r ? "MPI_Iallreduce" : "MPI_Allreduce";
    if (!r)
      status = MPI_Allreduce(MPI_IN_PLACE, c->recv, count, type, sum, *sub);
    else if (self->iallreduceAlgorithm)
      status = self->iallreduceAlgorithm->with([&] {
        return MPI_Iallreduce(MPI_IN_PLACE, c->recv, count, type, sum, *sub, r);
      });
    else
      status = MPI_Iallreduce(MPI_IN_PLACE, c->recv, count, type, sum, *sub, r);
    break;
  case STRATA_RT_BROADCAST:
    call = r ? "MPI_Ibcast" : "MPI_Bcast";
    status = r ? MPI_Ibcast(c->recv, count, type, int(c->root), *sub, r)
               : MPI_Bcast(c->recv, count, type, int(c->root), *sub);
    break;
  case STRATA_RT_REDUCE_SCATTER:
    call = r ? "MPI_Ireduce_scatter_block" : "MPI_Reduce_scatter_block";
    status =
        r ? MPI_Ireduce_scatter_block(c->send, c->recv, count, type, sum, *sub,
                                      r)
          : MPI_Reduce_scatter_block(c->send, c->recv, count, type, sum, *sub);
    break;
  case STRATA_RT_ALL_GATHER:
    call = r ? "MPI_Iallgather" : "MPI_Allgather";
    status =
        r ? MPI_Iallgather(c->send, count, type, c->recv, count, type, *sub, r)
          : MPI_Allgather(c->send, count, type, c->recv, count, type, *sub);
    break;
  default:
    delete r;
    return runtimeError(error, errorSize, "unknown collective " + Twine(c->op));
  }
  if (status != MPI_SUCCESS) {
    delete r;
    return runtimeError(error, errorSize, Twine(call) + " failed");
  }
  if (request)
    *request = r;
  return 0;
}

int MpiCommunicator::runtimeWait(void *user, void *request, char *error,
                                 size_t errorSize) {
  auto *self = static_cast<MpiCommunicator *>(user);
  if (self->onBegin)
    self->onBegin(nullptr);
  auto *r = static_cast<MPI_Request *>(request);
  Waiting waiting(self->waitLimit);
  int status = MPI_Wait(r, MPI_STATUS_IGNORE);
  delete r;
  if (status != MPI_SUCCESS)
    return runtimeError(error, errorSize, "MPI_Wait failed");
  return 0;
}

} // namespace strata
