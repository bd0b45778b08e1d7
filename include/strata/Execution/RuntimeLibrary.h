//===- RuntimeLibrary.h - A runtime's host functions ------------*- C++ -*-===//
//
// The host side of one runtime behind the C ABI (StrataRuntime.h), as a
// table of its functions: the CPU runtime linked into Strata, or a runtime
// loaded by path with its own symbols (the CUDA runtime, which defines the
// same names and needs the CUDA toolkit's libraries only when it is used).
// Executables talk to a runtime through this table alone.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_EXECUTION_RUNTIMELIBRARY_H
#define STRATA_EXECUTION_RUNTIMELIBRARY_H

#include "strata/Runtime/StrataRuntime.h"

#include "llvm/Support/Error.h"

#include <string>

namespace strata {

/// X(name) for every host function an executable calls: the member is the
/// ABI's name without `strata_rt_`.
#define STRATA_RT_HOST_FUNCTIONS(X)                                            \
  X(default_options)                                                           \
  X(abi_version)                                                               \
  X(create)                                                                    \
  X(destroy)                                                                   \
  X(set_collectives)                                                           \
  X(set_point_to_point)                                                        \
  X(error)                                                                     \
  X(clear_error)                                                               \
  X(active_site)                                                               \
  X(enable_trace)                                                              \
  X(take_trace)                                                                \
  X(now_us)                                                                    \
  X(alloc)                                                                     \
  X(free)                                                                      \
  X(write)                                                                     \
  X(read)                                                                      \
  X(scratch_bytes)                                                             \
  X(gemm_autotuned)                                                            \
  X(symbols)                                                                   \
  X(isa)

struct RuntimeLibrary {
  /// "the CPU runtime", "the CUDA runtime" (for messages).
  std::string description;
  /// The runtime target its programs are lowered for ("cpu", "cuda").
  std::string target;
#define STRATA_RT_MEMBER(name) decltype(&strata_rt_##name) name = nullptr;
  STRATA_RT_HOST_FUNCTIONS(STRATA_RT_MEMBER)
#undef STRATA_RT_MEMBER

  /// The CPU runtime Strata links.
  static const RuntimeLibrary &cpu();
  /// The CUDA runtime (libstrata_runtime_cuda.so beside the CPU runtime),
  /// loaded on first use; an error when it was not built or does not load.
  static llvm::Expected<const RuntimeLibrary *> cuda();
};

} // namespace strata

#endif // STRATA_EXECUTION_RUNTIMELIBRARY_H
