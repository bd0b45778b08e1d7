//===- DialectTest.cpp - Builder API and shape rules ----------------------===//

#include "strata/Model/Models.h"
#include "strata/Model/ProgramBuilder.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace strata;

namespace {

TEST(BroadcastShapes, NumPyRules) {
  auto s = broadcastShapes({8, 1, 4}, {3, 1});
  ASSERT_TRUE(succeeded(s));
  EXPECT_EQ(*s, (SmallVector<int64_t>{8, 3, 4}));
  EXPECT_TRUE(succeeded(broadcastShapes({}, {5})));
  EXPECT_TRUE(failed(broadcastShapes({2, 3}, {4, 3})));
}

class BuilderTest : public ::testing::Test {
protected:
  BuilderTest() { loadStrataDialects(context); }
  MLIRContext context;
};

TEST_F(BuilderTest, InferredTypesNeedNoResultTypes) {
  ProgramBuilder b(&context);
  ValueRange in = b.beginStep({b.tensor({2, 4, 8}, b.f32())}, {"x"});
  Value w = b.param("w", {8, 16}, InitKind::Normal, 0.02);
  Value y = b.matmul(in[0], w);
  EXPECT_EQ(cast<RankedTensorType>(y.getType()).getShape(),
            ArrayRef<int64_t>({2, 4, 16}));
  Value t = b.transpose(y, {0, 2, 1});
  EXPECT_EQ(cast<RankedTensorType>(t.getType()).getShape(),
            ArrayRef<int64_t>({2, 16, 4}));
}

TEST_F(BuilderTest, DropoutKeysAreUniqueAndZeroProbIsIdentity) {
  ProgramBuilder b(&context);
  ValueRange in = b.beginStep({b.tensor({4}, b.f32())}, {"x"});
  EXPECT_EQ(b.dropout(in[0], 0.0), in[0]);
  auto d0 = b.dropout(in[0], 0.1).getDefiningOp<DropoutOp>();
  auto d1 = b.dropout(in[0], 0.1).getDefiningOp<DropoutOp>();
  ASSERT_TRUE(d0 && d1);
  EXPECT_NE(d0.getKey(), d1.getKey());
}

TEST_F(BuilderTest, GptParameterCountMatchesFormula) {
  GptConfig c;
  c.layers = 3;
  c.hidden = 32;
  c.heads = 4;
  c.seq = 16;
  c.vocab = 50;
  auto module = buildGpt(context, c);
  ASSERT_TRUE(succeeded(verify(*module)));
  int64_t elements = 0;
  module->walk([&](ParamOp p) { elements += p.getTensorType().getNumElements(); });
  int64_t h = c.hidden;
  // Per block: 4 h*h attention weights + 4h biases, 8 h*h MLP weights +
  // 5h biases, two layer norms (4h). Plus wte, wpe and ln_f.
  int64_t perBlock = 12 * h * h + 13 * h;
  EXPECT_EQ(elements, c.layers * perBlock + c.vocab * h + c.seq * h + 2 * h);
}

TEST_F(BuilderTest, InvalidConfigsAreRejected) {
  GptConfig c;
  c.hidden = 30;
  c.heads = 4;
  llvm::Error err = validate(c);
  ASSERT_TRUE(static_cast<bool>(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("divisible"), std::string::npos);
  MlpConfig m;
  m.sizes = {10};
  llvm::Error mlpErr = validate(m);
  ASSERT_TRUE(static_cast<bool>(mlpErr));
  EXPECT_NE(llvm::toString(std::move(mlpErr)).find("at least"),
            std::string::npos);
}

} // namespace
