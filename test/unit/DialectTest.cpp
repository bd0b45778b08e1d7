//===- DialectTest.cpp - Builder API and shape rules ----------------------===//

#include "strata/Model/Models.h"
#include "strata/Model/ProgramBuilder.h"
#include "strata/Passes/Amp.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"

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

namespace {

class ParsedTest : public ::testing::Test {
protected:
  ParsedTest() { loadStrataDialects(context); }
  OwningOpRef<ModuleOp> parse(StringRef text) {
    return parseSourceString<ModuleOp>(text, &context);
  }
  MLIRContext context;
};

TEST_F(ParsedTest, RankGridCoordinatesAndGroups) {
  OwningOpRef<ModuleOp> module =
      parse("strata.rank_grid @ranks(pp = 2, dp = 3, sharding = 2, mp = 1)");
  ASSERT_TRUE(module);
  RankGridOp grid = findRankGrid(*module);
  ASSERT_TRUE(grid);
  EXPECT_EQ(grid.getWorldSize(), 12);
  // Rank 9 = ((1 * 3 + 1) * 2 + 1) * 1 + 0.
  EXPECT_EQ(grid.getCoordinate(9, GridAxis::Pp), 1);
  EXPECT_EQ(grid.getCoordinate(9, GridAxis::Dp), 1);
  EXPECT_EQ(grid.getCoordinate(9, GridAxis::Sharding), 1);
  EXPECT_EQ(grid.getCoordinate(9, GridAxis::Mp), 0);
  using Lists = SmallVector<SmallVector<int64_t>>;
  EXPECT_EQ(grid.getGroups({GridAxis::Sharding}),
            (Lists{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}}));
  EXPECT_EQ(grid.getGroups({GridAxis::Dp}),
            (Lists{{0, 2, 4}, {1, 3, 5}, {6, 8, 10}, {7, 9, 11}}));
  EXPECT_EQ(grid.getGroups({GridAxis::Pp}),
            (Lists{{0, 6}, {1, 7}, {2, 8}, {3, 9}, {4, 10}, {5, 11}}));
  EXPECT_EQ(grid.getGroups({GridAxis::Dp, GridAxis::Sharding}),
            (Lists{{0, 1, 2, 3, 4, 5}, {6, 7, 8, 9, 10, 11}}));
  // Every group partitions the world.
  for (GridAxis axis : {GridAxis::Pp, GridAxis::Dp, GridAxis::Sharding}) {
    SmallVector<int64_t> all;
    for (const SmallVector<int64_t> &list : grid.getGroups({axis}))
      all.append(list.begin(), list.end());
    llvm::sort(all);
    for (int64_t r = 0; r < 12; ++r)
      EXPECT_EQ(all[r], r);
  }
}

TEST_F(ParsedTest, StepFunctionRule) {
  OwningOpRef<ModuleOp> one = parse("func.func @f() { return }");
  ASSERT_TRUE(one);
  auto step = findStepFunction(*one);
  ASSERT_TRUE(static_cast<bool>(step));
  EXPECT_EQ(step->getSymName(), "f");
  OwningOpRef<ModuleOp> named =
      parse("func.func @f() { return }\nfunc.func @train_step() { return }");
  step = findStepFunction(*named);
  ASSERT_TRUE(static_cast<bool>(step));
  EXPECT_EQ(step->getSymName(), "train_step");
  OwningOpRef<ModuleOp> two =
      parse("func.func @f() { return }\nfunc.func @g() { return }");
  step = findStepFunction(*two);
  ASSERT_FALSE(static_cast<bool>(step));
  EXPECT_EQ(llvm::toString(step.takeError()),
            "the program has 2 functions with a body (@f, @g) and none is "
            "named @train_step: which one is the step?");
}

TEST_F(ParsedTest, InPlaceOperandsComeFromTheOpDefinitions) {
  OwningOpRef<ModuleOp> module = parse(R"(
func.func @f(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %0 = strata.add %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = strata.relu %0 : (tensor<4xf32>) -> tensor<4xf32>
  %2 = strata.relu_grad %1, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %3 = strata.reshape %2 : (tensor<4xf32>) -> tensor<2x2xf32>
  %4 = strata.matmul %3, %3 : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %n = strata.global_norm %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<f32>
  %c:2 = strata.clip_by_global_norm %a, %b, %n {max_norm = 1.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>)
  return %2 : tensor<4xf32>
})");
  ASSERT_TRUE(module);
  SmallVector<SmallVector<SmallVector<unsigned>>> seen;
  module->walk([&](Operation *op) {
    if (auto inPlace = dyn_cast<InPlaceOpInterface>(op)) {
      SmallVector<SmallVector<unsigned>> perResult;
      for (unsigned r = 0; r < op->getNumResults(); ++r)
        perResult.push_back(inPlace.getInPlaceOperands(r));
      seen.push_back(perResult);
    }
  });
  // add: both operands; relu: its input; relu_grad: the incoming gradient;
  // reshape: its input; matmul, global_norm: none; clip_by_global_norm:
  // each result its own input (not the norm).
  using Operands = SmallVector<SmallVector<unsigned>>;
  EXPECT_EQ(seen,
            (SmallVector<Operands>{{{0, 1}}, {{0}}, {{1}}, {{0}}, {{0}, {1}}}));
}

/// The ops a mixed-precision list may name are ops of the dialect, and the
/// default lists are among them.
TEST_F(BuilderTest, AmpListsNameOpsOfTheDialect) {
  for (llvm::StringRef name : amp::listableOps())
    EXPECT_TRUE(
        RegisteredOperationName::lookup(("strata." + name).str(), &context))
        << name.str();
  for (auto list : {amp::defaultWhiteList(), amp::defaultBlackList()})
    for (llvm::StringRef name : list)
      EXPECT_TRUE(llvm::is_contained(amp::listableOps(), name)) << name.str();
}

} // namespace
