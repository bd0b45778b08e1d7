// What folds away of strata.cast: a cast to the input's own type and a
// round trip through a wider type; a round trip through a narrower type
// rounds, and stays.
// RUN: strata-opt %s -split-input-file --canonicalize | FileCheck %s

// CHECK-LABEL: func @same_type
// CHECK-NEXT: return %arg0
func.func @same_type(%x: tensor<4xbf16>) -> tensor<4xbf16> {
  %0 = strata.cast %x : (tensor<4xbf16>) -> tensor<4xbf16>
  return %0 : tensor<4xbf16>
}

// -----

// CHECK-LABEL: func @through_f32
// CHECK-NEXT: return %arg0
func.func @through_f32(%x: tensor<4xbf16>) -> tensor<4xbf16> {
  %0 = strata.cast %x : (tensor<4xbf16>) -> tensor<4xf32>
  %1 = strata.cast %0 : (tensor<4xf32>) -> tensor<4xbf16>
  return %1 : tensor<4xbf16>
}

// -----

// CHECK-LABEL: func @through_bf16
// CHECK: %[[L:.*]] = strata.cast %arg0 : (tensor<4xf32>) -> tensor<4xbf16>
// CHECK: %[[W:.*]] = strata.cast %[[L]] : (tensor<4xbf16>) -> tensor<4xf32>
// CHECK: return %[[W]]
func.func @through_bf16(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = strata.cast %x : (tensor<4xf32>) -> tensor<4xbf16>
  %1 = strata.cast %0 : (tensor<4xbf16>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----

// bf16 -> f16 loses range, f16 -> bf16 precision: neither is a round trip.
// CHECK-LABEL: func @between_halves
// CHECK-COUNT-2: strata.cast
func.func @between_halves(%x: tensor<4xbf16>) -> tensor<4xbf16> {
  %0 = strata.cast %x : (tensor<4xbf16>) -> tensor<4xf16>
  %1 = strata.cast %0 : (tensor<4xf16>) -> tensor<4xbf16>
  return %1 : tensor<4xbf16>
}
