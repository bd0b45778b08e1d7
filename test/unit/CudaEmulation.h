//===- CudaEmulation.h - CUDA blocks and warps as host threads -*- C++ -*-===//
//
// What the host tests of the CUDA runtime's kernels share (no GPU, no CUDA
// runtime library: only the toolkit's headers): a block's threads are host
// threads, __syncthreads and __syncwarp barriers, warp shuffles go through
// memory, and blocks run one after another (so a kernel's static shared
// memory may be one array). The including test defines what else its
// kernels use (mma.sync, ldmatrix, cp.async for flash attention).
//
// What this cannot show: that the hardware behaves as written here, bank
// conflicts, alignment faults, speed. The GPU check (test/gpu) runs the same
// kernels on a device.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_TEST_UNIT_CUDAEMULATION_H
#define STRATA_TEST_UNIT_CUDAEMULATION_H

// Launch bounds only guide nvcc. (The tests that include this are built
// with -Wno-unknown-pragmas for `#pragma unroll`.)
#define __launch_bounds__(...)

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <array>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

// The thread's place in the grid.
inline thread_local uint3 threadIdx, blockIdx;
inline thread_local dim3 blockDim, gridDim;

namespace emulation {
/// A barrier for `count` threads, reusable.
class Barrier {
  std::mutex mutex;
  std::condition_variable changed;
  int count, waiting = 0;
  long generation = 0;

public:
  explicit Barrier(int count) : count(count) {}
  void wait() {
    std::unique_lock<std::mutex> lock(mutex);
    long mine = generation;
    if (++waiting == count) {
      waiting = 0;
      ++generation;
      changed.notify_all();
      return;
    }
    changed.wait(lock, [&] { return generation != mine; });
  }
};

/// What a block's threads share besides its shared memory.
struct Block {
  explicit Block(int threads) : all(threads) {
    for (int w = 0; w < threads / 32; ++w)
      warps.emplace_back(std::make_unique<Barrier>(32));
    shuffle.resize(threads);
    a.resize(threads);
    b.resize(threads);
    rows.resize(threads);
  }
  Barrier all;
  std::vector<std::unique_ptr<Barrier>> warps;
  /// Each thread's shuffled value (up to 8 bytes).
  std::vector<uint64_t> shuffle;
  /// Each thread's mma operand registers, handed to its warp.
  std::vector<std::array<uint32_t, 4>> a;
  std::vector<std::array<uint32_t, 2>> b;
  /// Each thread's row address for ldmatrix.
  std::vector<const uint16_t *> rows;
};
inline thread_local Block *block = nullptr;

/// Runs block `index` of `grid` with `threads` threads (a multiple of 32),
/// each calling `body()` with its indices set; returns when all have ended.
template <typename Body>
void runBlock(dim3 grid, uint3 index, unsigned threads, Body &&body) {
  Block state{int(threads)};
  std::vector<std::thread> running;
  running.reserve(threads);
  for (unsigned t = 0; t < threads; ++t)
    running.emplace_back([&, t] {
      block = &state;
      threadIdx = {t, 0, 0};
      blockIdx = index;
      blockDim = dim3(threads);
      gridDim = grid;
      body();
    });
  for (std::thread &t : running)
    t.join();
}

/// Runs every block of `grid` (x fastest), one after another.
template <typename Body>
void runGrid(dim3 grid, unsigned threads, Body &&body) {
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x)
        runBlock(grid, {x, y, z}, threads, body);
}
} // namespace emulation

inline void __syncthreads() { emulation::block->all.wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) {
  emulation::block->warps[threadIdx.x / 32]->wait();
}
/// The value of lane (lane ^ laneMask) of the warp, for every lane.
template <typename T> T __shfl_xor_sync(unsigned, T v, int laneMask) {
  static_assert(sizeof(T) <= sizeof(uint64_t) &&
                std::is_trivially_copyable_v<T>);
  emulation::Block &b = *emulation::block;
  const unsigned warp = threadIdx.x / 32 * 32, lane = threadIdx.x % 32;
  std::memcpy(&b.shuffle[warp + lane], &v, sizeof v);
  __syncwarp();
  T got;
  std::memcpy(&got, &b.shuffle[warp + (lane ^ unsigned(laneMask))], sizeof got);
  __syncwarp();
  return got;
}

#endif // STRATA_TEST_UNIT_CUDAEMULATION_H
