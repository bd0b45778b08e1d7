// Settings strata-pipeline refuses, with their messages.
// RUN: rm -rf %t && split-file %s %t && cd %t
// RUN: not strata-opt mlp.mlir --strata-rank-grid=pp=4 --strata-stage-split --strata-autodiff --strata-gradient-merge=k-steps=2 --strata-optimizer --strata-pipeline="accumulate-steps=2 schedule=1F1B" 2>&1 | FileCheck %s --check-prefix=FEW
// FEW: error: strata-pipeline: schedule 1F1B needs at least pp-degree micro-batches (accumulate_steps >= pp_degree): 2 micro-batches for 4 stages
// RUN: not strata-opt mlp.mlir --strata-rank-grid=pp=4 --strata-stage-split --strata-autodiff --strata-gradient-merge=k-steps=2 --strata-optimizer --strata-pipeline="accumulate-steps=2 schedule=ZBH1" 2>&1 | FileCheck %s --check-prefix=FEWZB
// FEWZB: error: strata-pipeline: schedule ZBH1 needs at least pp-degree micro-batches
// FThenB has no such limit.
// RUN: strata-opt mlp.mlir --strata-rank-grid=pp=4 --strata-stage-split --strata-autodiff --strata-gradient-merge=k-steps=2 --strata-optimizer --strata-pipeline="accumulate-steps=2 schedule=FThenB" -o /dev/null
// RUN: not strata-opt mlp.mlir --strata-rank-grid=pp=2 --strata-stage-split=vpp-degree=2 --strata-autodiff --strata-optimizer --strata-pipeline="vpp-degree=2 accumulate-steps=1 schedule=VPP" 2>&1 | FileCheck %s --check-prefix=VPP
// VPP: error: strata-pipeline: schedule VPP needs the micro-batches to be a multiple of pp-degree: 1 micro-batches for 2 stages
// RUN: not strata-opt mlp.mlir --strata-rank-grid=pp=2 --strata-stage-split --strata-autodiff --strata-gradient-merge=k-steps=4 --strata-optimizer --strata-pipeline="accumulate-steps=4 schedule=VPP" 2>&1 | FileCheck %s --check-prefix=VPP1
// VPP1: error: strata-pipeline: schedule VPP needs vpp-degree >= 2
// RUN: not strata-opt mlp.mlir --strata-rank-grid=pp=2 --strata-stage-split=vpp-degree=2 --strata-autodiff --strata-gradient-merge=k-steps=4 --strata-optimizer --strata-pipeline="vpp-degree=2 accumulate-steps=4 schedule=1F1B" 2>&1 | FileCheck %s --check-prefix=CHUNKS
// CHUNKS: error: strata-pipeline: vpp-degree 2 needs schedule VPP, not 1F1B
// RUN: not strata-opt mlp.mlir --strata-rank-grid=pp=2 --strata-stage-split --strata-autodiff --strata-gradient-merge=k-steps=4 --strata-optimizer --strata-pipeline="accumulate-steps=4 schedule=GPipe" 2>&1 | FileCheck %s --check-prefix=NAME
// NAME: error: strata-pipeline: unknown schedule 'GPipe' (expected FThenB, 1F1B, Eager1F1B, VPP or ZBH1)
// RUN: not strata-opt mlp.mlir --strata-rank-grid=pp=2 --strata-stage-split --strata-autodiff --strata-optimizer --strata-pipeline=accumulate-steps=4 2>&1 | FileCheck %s --check-prefix=MERGE
// MERGE: error: strata-pipeline: the step has 1 micro-batches, accumulate-steps is 4 (run strata-gradient-merge with k-steps = accumulate-steps before strata-optimizer)
// RUN: not strata-opt mlp.mlir --strata-rank-grid=pp=2 --strata-stage-split --strata-autodiff --strata-gradient-merge=k-steps=4 --strata-optimizer --strata-pipeline="accumulate-steps=4 micro-batch-size=3" 2>&1 | FileCheck %s --check-prefix=MBS
// MBS: error: strata-pipeline: micro-batch-size is 3, but the step's batch of 8 rows per rank in 4 micro-batches gives 2
// RUN: not strata-opt mlp.mlir --strata-autodiff --strata-gradient-merge=k-steps=4 --strata-optimizer --strata-rank-grid=pp=2 --strata-pipeline=accumulate-steps=4 2>&1 | FileCheck %s --check-prefix=NOSTAGE
// NOSTAGE: error: strata-pipeline: no op carries strata.stage (run strata-stage-split before strata-autodiff)
// RUN: not strata-opt mlp.mlir --strata-rank-grid="pp=2 dp=2" --strata-stage-split --strata-autodiff --strata-gradient-merge=k-steps=4 --strata-optimizer --strata-pipeline="accumulate-steps=4 rank=4" 2>&1 | FileCheck %s --check-prefix=RANK
// RANK: error: strata-pipeline: rank 4 is outside the rank grid of 4 ranks
// Each stage computes the clipping of its own gradients from the combined
// global norm; any other reader of the norm (here a broadcast added to the
// optimizer's output) cannot be split over the stages.
// RUN: strata-opt mlp.mlir --strata-rank-grid=pp=2 --strata-stage-split --strata-autodiff --strata-gradient-merge=k-steps=2 --strata-optimizer=grad-clip-norm=1.0 -o clip.mlir
// RUN: sed 's/^\( *\)\(%%[0-9]*\) = strata.global_norm\(.*\)$/&\n\1%%extra = strata.broadcast_to \2 {strata.role = #strata.role<optimizer>} : (tensor<f32>) -> tensor<4xf32>/' clip.mlir > clip-read.mlir
// RUN: not strata-opt clip-read.mlir --strata-pipeline="accumulate-steps=2 schedule=1F1B" 2>&1 | FileCheck %s --check-prefix=NORM
// NORM: error: 'strata.broadcast_to' op reads a global norm over gradients of several pipeline stages; only clipping, guarded updates and scalar bookkeeping can (each stage computes them from the combined norm)
// A stage annotation beyond the pipeline.
// RUN: not strata-opt pingpong.mlir --strata-rank-grid --strata-stage-split 2>&1 | FileCheck %s --check-prefix=RANGE
// RANGE: pingpong.mlir:9:10: error: 'strata.matmul' op is placed on stage 1, but the pipeline has 1 (the rank grid's pp 1 x vpp-degree 1)

// Stages that hand values back and forth (0 -> 1 -> 0 -> 1 within one
// forward) train under FThenB but deadlock under 1F1B: stage 0 runs F1
// before B0 and needs stage 1's F1, while stage 1 runs B0 before F1 and
// needs stage 0's B0. The simulation finds it at compile time.
// RUN: strata-opt pingpong.mlir --strata-rank-grid=pp=2 --strata-stage-split --strata-autodiff --strata-gradient-merge=k-steps=2 --strata-optimizer=type=sgd --strata-pipeline="accumulate-steps=2 schedule=FThenB" -o /dev/null
// RUN: not strata-opt pingpong.mlir --strata-rank-grid=pp=2 --strata-stage-split --strata-autodiff --strata-gradient-merge=k-steps=2 --strata-optimizer=type=sgd --strata-pipeline="accumulate-steps=2 schedule=1F1B" 2>&1 | FileCheck %s --check-prefix=DEADLOCK
// DEADLOCK: error: strata-pipeline: schedule 1F1B deadlocks; stage 0 waits in F1 for the strata.matmul_grad result of micro-batch 0 (pingpong.mlir:9:10) from stage 1; stage 1 waits in B0 for the strata.matmul result of micro-batch 1 (pingpong.mlir:11:10) from stage 0

//--- mlp.mlir
module {
  strata.param @w0 : tensor<4x4xf32> init <ones>
  strata.param @w1 : tensor<4x4xf32> init <ones>
  strata.param @w2 : tensor<4x4xf32> init <ones>
  strata.param @w3 : tensor<4x4xf32> init <ones>
  func.func @train_step(%x: tensor<8x4xf32> {strata.name = "x"}, %y: tensor<8xi32> {strata.name = "y"}) -> tensor<f32> {
    %w0 = strata.get_param @w0 {strata.layer = "l0"} : tensor<4x4xf32>
    %a = strata.matmul %x, %w0 {strata.layer = "l0"} : (tensor<8x4xf32>, tensor<4x4xf32>) -> tensor<8x4xf32>
    %w1 = strata.get_param @w1 {strata.layer = "l1"} : tensor<4x4xf32>
    %b = strata.matmul %a, %w1 {strata.layer = "l1"} : (tensor<8x4xf32>, tensor<4x4xf32>) -> tensor<8x4xf32>
    %w2 = strata.get_param @w2 {strata.layer = "l2"} : tensor<4x4xf32>
    %c = strata.matmul %b, %w2 {strata.layer = "l2"} : (tensor<8x4xf32>, tensor<4x4xf32>) -> tensor<8x4xf32>
    %w3 = strata.get_param @w3 {strata.layer = "l3"} : tensor<4x4xf32>
    %d = strata.matmul %c, %w3 {strata.layer = "l3"} : (tensor<8x4xf32>, tensor<4x4xf32>) -> tensor<8x4xf32>
    %l = strata.cross_entropy %d, %y : (tensor<8x4xf32>, tensor<8xi32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}

//--- pingpong.mlir
module {
  strata.param @w0 : tensor<4x4xf32> init <ones>
  strata.param @w1 : tensor<4x4xf32> init <ones>
  strata.param @w2 : tensor<4x4xf32> init <ones>
  func.func @train_step(%x: tensor<4x4xf32> {strata.name = "x"}, %y: tensor<4xi32> {strata.name = "y"}) -> tensor<f32> {
    %w0 = strata.get_param @w0 : tensor<4x4xf32>
    %a = strata.matmul %x, %w0 {strata.stage = 0 : i64} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
    %w1 = strata.get_param @w1 : tensor<4x4xf32>
    %b = strata.matmul %a, %w1 {strata.stage = 1 : i64} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
    %w2 = strata.get_param @w2 : tensor<4x4xf32>
    %c = strata.matmul %b, %w2 {strata.stage = 0 : i64} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
    %l = strata.cross_entropy %c, %y {strata.stage = 1 : i64} : (tensor<4x4xf32>, tensor<4xi32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}
