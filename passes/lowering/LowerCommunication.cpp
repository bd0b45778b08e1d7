//===- LowerCommunication.cpp - Collectives and point-to-point ------------===//
//
// all_reduce (sum, mean), broadcast, reduce_scatter and all_gather through
// strata_rt_collective, started where the op stands and completed by
// strata_rt_wait right before the first reader of the result; send and
// recv within a communication group.
//
//===----------------------------------------------------------------------===//

#include "RuntimeLowering.h"

using namespace mlir;
using namespace strata;
using namespace strata::lowering;

void strata::lowering::populateCollectiveLoweringPatterns(
    RewritePatternSet &patterns, RuntimeLowering &l) {
  addLowering<InitTokenOp>(patterns, l, [](InitTokenOp, RuntimeLowering &) {
    return success(); // tokens order, nothing runs
  });
  addLowering<AllReduceOp>(patterns, l, [](AllReduceOp o, RuntimeLowering &l) {
    return l.collective(o, STRATA_RT_ALL_REDUCE, o.getInput(), o.getKind(), 0,
                        o.getGroupAttr());
  });
  addLowering<BroadcastOp>(patterns, l, [](BroadcastOp o, RuntimeLowering &l) {
    return l.collective(o, STRATA_RT_BROADCAST, o.getInput(), ReduceKind::Sum,
                        o.getRoot(), o.getGroupAttr());
  });
  addLowering<ReduceScatterOp>(
      patterns, l, [](ReduceScatterOp o, RuntimeLowering &l) {
        return l.collective(o, STRATA_RT_REDUCE_SCATTER, o.getInput(),
                            o.getKind(), 0, o.getGroupAttr(), o.getDim());
      });
  addLowering<AllGatherOp>(patterns, l, [](AllGatherOp o, RuntimeLowering &l) {
    return l.collective(o, STRATA_RT_ALL_GATHER, o.getInput(), ReduceKind::Sum,
                        0, o.getGroupAttr(), o.getDim());
  });
}

void strata::lowering::populatePointToPointLoweringPatterns(
    RewritePatternSet &patterns, RuntimeLowering &l) {
  addLowering<SendOp>(patterns, l, [](SendOp o, RuntimeLowering &l) {
    l.call("strata_rt_send",
           {l.site(), l.tensor(o.getInput()), l.i64(numel(o.getInput())),
            l.i64(o.getPeer()),
            l.constantArray(l.groupDescriptor(o, o.getGroupAttr()))});
    return success();
  });
  addLowering<RecvOp>(patterns, l, [](RecvOp o, RuntimeLowering &l) {
    l.call("strata_rt_recv",
           {l.site(), l.tensor(o.getResult()), l.i64(numel(o.getResult())),
            l.i64(o.getPeer()),
            l.constantArray(l.groupDescriptor(o, o.getGroupAttr()))});
    return success();
  });
}
