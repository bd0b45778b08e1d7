//===- RuntimeLibrary.cpp - A runtime's host functions --------------------===//

#include "strata/Execution/RuntimeLibrary.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/Path.h"

#include <dlfcn.h>

#include <mutex>

using namespace strata;

const RuntimeLibrary &RuntimeLibrary::cpu() {
  static const RuntimeLibrary library = [] {
    RuntimeLibrary l;
    l.description = "the CPU runtime";
    l.target = "cpu";
#define STRATA_RT_LINKED(name) l.name = &strata_rt_##name;
    STRATA_RT_HOST_FUNCTIONS(STRATA_RT_LINKED)
#undef STRATA_RT_LINKED
    return l;
  }();
  return library;
}

/// The directory of the linked CPU runtime, where the build and an
/// installation put the other runtimes too.
static std::string runtimeDirectory() {
  Dl_info info;
  if (!dladdr(reinterpret_cast<void *>(&strata_rt_create), &info) ||
      !info.dli_fname)
    return "";
  return llvm::sys::path::parent_path(info.dli_fname).str();
}

llvm::Expected<const RuntimeLibrary *> RuntimeLibrary::cuda() {
  static std::once_flag once;
  static RuntimeLibrary library;
  static std::string failure;
  std::call_once(once, [] {
    llvm::SmallString<256> path(runtimeDirectory());
    llvm::sys::path::append(path, "libstrata_runtime_cuda.so");
    // Its own namespace: it defines the CPU runtime's names too.
    void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char *why = dlerror();
      failure = "cannot load the CUDA runtime (" + path.str().str() +
                "): " + (why ? why : "unknown error") +
                "; Strata builds it where the CUDA toolkit is installed";
      return;
    }
    library.description = "the CUDA runtime";
    library.target = "cuda";
#define STRATA_RT_LOADED(name)                                                 \
  library.name = reinterpret_cast<decltype(library.name)>(                     \
      dlsym(handle, "strata_rt_" #name));                                      \
  if (!library.name) {                                                         \
    failure =                                                                  \
        "the CUDA runtime (" + path.str().str() + ") has no strata_rt_" #name; \
    return;                                                                    \
  }
    STRATA_RT_HOST_FUNCTIONS(STRATA_RT_LOADED)
#undef STRATA_RT_LOADED
    // The handle stays open for the process's life.
  });
  if (!failure.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(), failure);
  return &library;
}
