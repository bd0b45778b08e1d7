//===- HostBuffer.cpp - Host buffers of runtime element types -------------===//

#include "strata/Execution/Executable.h"
#include "strata/Runtime/StrataRuntime.h"

#include "../../runtime/common/LowPrecision.h"

#include <cassert>

using namespace strata;
using strata::cpu::withFloatType;

bool strata::isHostBufferType(int64_t dtype) {
  return dtype == STRATA_RT_F32 || dtype == STRATA_RT_BF16 ||
         dtype == STRATA_RT_F16 || dtype == STRATA_RT_I32 ||
         dtype == STRATA_RT_I64;
}

void strata::writeHostBuffer(const reference::Tensor &t, int64_t dtype,
                             void *data) {
  writeHostValues(t.data.data(), t.numElements(), dtype, data);
}

void strata::writeHostValues(const double *values, int64_t count, int64_t dtype,
                             void *data) {
  assert(isHostBufferType(dtype) && "not a host buffer type");
  // Floats through f32: a bf16 or f16 value is its f32 value rounded.
  if (withFloatType(dtype, [&](auto type) {
        using T = decltype(type);
        for (int64_t i = 0; i < count; ++i)
          static_cast<T *>(data)[i] = T(float(values[i]));
      }))
    return;
  for (int64_t i = 0; i < count; ++i) {
    if (dtype == STRATA_RT_I32)
      static_cast<int32_t *>(data)[i] = int32_t(values[i]);
    else
      static_cast<int64_t *>(data)[i] = int64_t(values[i]);
  }
}

reference::Tensor strata::readHostBuffer(std::vector<int64_t> shape,
                                         int64_t dtype, const void *data) {
  assert(isHostBufferType(dtype) && "not a host buffer type");
  reference::Tensor t(std::move(shape));
  if (withFloatType(dtype, [&](auto type) {
        using T = decltype(type);
        for (int64_t i = 0, n = t.numElements(); i < n; ++i)
          t.data[i] = double(float(static_cast<const T *>(data)[i]));
      }))
    return t;
  for (int64_t i = 0, n = t.numElements(); i < n; ++i)
    t.data[i] = dtype == STRATA_RT_I32
                    ? double(static_cast<const int32_t *>(data)[i])
                    : double(static_cast<const int64_t *>(data)[i]);
  return t;
}
