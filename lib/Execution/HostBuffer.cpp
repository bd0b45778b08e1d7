//===- HostBuffer.cpp - Host buffers of runtime element types -------------===//

#include "strata/Execution/Executable.h"
#include "strata/Runtime/StrataRuntime.h"

#include <cassert>

using namespace strata;

bool strata::isHostBufferType(int64_t dtype) {
  return dtype == STRATA_RT_F32 || dtype == STRATA_RT_I32 ||
         dtype == STRATA_RT_I64;
}

void strata::writeHostBuffer(const reference::Tensor &t, int64_t dtype,
                             void *data) {
  assert(isHostBufferType(dtype) && "not a host buffer type");
  for (int64_t i = 0, n = t.numElements(); i < n; ++i) {
    if (dtype == STRATA_RT_F32)
      static_cast<float *>(data)[i] = float(t.data[i]);
    else if (dtype == STRATA_RT_I32)
      static_cast<int32_t *>(data)[i] = int32_t(t.data[i]);
    else
      static_cast<int64_t *>(data)[i] = int64_t(t.data[i]);
  }
}

reference::Tensor strata::readHostBuffer(std::vector<int64_t> shape,
                                         int64_t dtype, const void *data) {
  assert(isHostBufferType(dtype) && "not a host buffer type");
  reference::Tensor t(std::move(shape));
  for (int64_t i = 0, n = t.numElements(); i < n; ++i)
    t.data[i] = dtype == STRATA_RT_F32
                    ? double(static_cast<const float *>(data)[i])
                : dtype == STRATA_RT_I32
                    ? double(static_cast<const int32_t *>(data)[i])
                    : double(static_cast<const int64_t *>(data)[i]);
  return t;
}
