// RUN: not strata-opt %s --strata-gemm-epilogue-fusion=target=tpu 2>&1 | FileCheck %s
// CHECK: error: strata-gemm-epilogue-fusion: unknown target 'tpu' (cpu, cuda)
module {}
