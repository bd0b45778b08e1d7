//===- FuzzSafetensors.cpp - libFuzzer target: the safetensors reader ----===//

#include "strata/Train/Train.h"

#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  auto file = strata::parseSafetensors(bytes, "fuzz.safetensors");
  if (!file)
    llvm::consumeError(file.takeError());
  return 0;
}
