//===- AutodiffTest.cpp - Finite-difference checks of strata-autodiff -----===//
//
// Each case is a small program whose loss is sum(op(params...) * R) for a
// fixed random R. The autodiff pass appends the backward; the reference
// evaluator (double precision) runs it, and every gradient element is
// compared with a central finite difference of the loss.
//
//===----------------------------------------------------------------------===//

#include "strata/Dialect/Strata.h"
#include "strata/InitAllDialects.h"
#include "strata/Model/Models.h"
#include "strata/Reference/Evaluator.h"

#include "StrataTestContext.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace mlir;
using namespace strata;
using reference::Tensor;

namespace {

Tensor ints(std::vector<int64_t> shape, std::vector<double> values) {
  Tensor t(std::move(shape));
  t.data = std::move(values);
  return t;
}

struct Case {
  const char *name;
  const char *program;
  /// Integer inputs of the step function (ids, labels), in order.
  std::vector<Tensor> args;
};

void PrintTo(const Case &c, std::ostream *os) { *os << c.name; }

class AutodiffFixture : public StrataTestContext {
protected:

  /// Random values for every parameter (away from ReLU's kink).
  llvm::StringMap<Tensor> randomParams(ModuleOp module, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<double> dist(0.2, 1.0);
    std::bernoulli_distribution sign(0.5);
    llvm::StringMap<Tensor> params;
    module.walk([&](ParamOp p) {
      auto type = p.getTensorType();
      Tensor t(std::vector<int64_t>(type.getShape().begin(),
                                    type.getShape().end()));
      for (double &v : t.data)
        v = sign(gen) ? dist(gen) : -dist(gen);
      params[p.getSymName()] = t;
    });
    return params;
  }

  void check(ModuleOp module, llvm::ArrayRef<Tensor> args,
             double rtol = 1e-6, double atol = 1e-7) {
    PassManager run(&context);
    ASSERT_TRUE(succeeded(parsePassPipeline("strata-autodiff", run)));
    ASSERT_TRUE(succeeded(run.run(module)));

    auto func = module.lookupSymbol<func::FuncOp>("train_step");
    ASSERT_TRUE(func);
    llvm::StringMap<Tensor> params = randomParams(module, 7);
    reference::EvalOptions options;
    options.seed = 1234;
    auto results = reference::evaluate(func, args, params, options);
    ASSERT_TRUE(static_cast<bool>(results))
        << llvm::toString(results.takeError());
    ASSERT_EQ(results->size(), func.getNumResults());

    auto lossAt = [&](llvm::StringMap<Tensor> &p) {
      auto r = reference::evaluate(func, args, p, options);
      EXPECT_TRUE(static_cast<bool>(r));
      return (*r)[0].data[0];
    };
    int checked = 0;
    for (unsigned i = 1; i < func.getNumResults(); ++i) {
      auto ref =
          func.getResultAttrOfType<FlatSymbolRefAttr>(i, "strata.grad_of");
      ASSERT_TRUE(ref);
      const Tensor &grad = (*results)[i];
      Tensor &param = params[ref.getValue()];
      ASSERT_EQ(grad.shape, param.shape) << ref.getValue().str();
      for (int64_t e = 0; e < param.numElements(); ++e) {
        double saved = param.data[e];
        const double h = 1e-5;
        param.data[e] = saved + h;
        double up = lossAt(params);
        param.data[e] = saved - h;
        double down = lossAt(params);
        param.data[e] = saved;
        double fd = (up - down) / (2 * h);
        EXPECT_NEAR(grad.data[e], fd, atol + rtol * std::abs(fd))
            << ref.getValue().str() << "[" << e << "]";
        ++checked;
      }
    }
    EXPECT_GT(checked, 0);
  }

};

class AutodiffTest : public AutodiffFixture,
                     public ::testing::TestWithParam<Case> {};

class AutodiffModelTest : public AutodiffFixture, public ::testing::Test {};

TEST_F(AutodiffModelTest, TinyGptWithDropoutMatchesFiniteDifferences) {
  GptConfig config;
  config.layers = 2;
  config.hidden = 8;
  config.heads = 2;
  config.seq = 4;
  config.vocab = 11;
  config.batch = 2;
  config.dropout = 0.1;
  OwningOpRef<ModuleOp> module = buildGpt(context, config);
  Tensor tokens = ints({2, 4}, {1, 5, 9, 3, 0, 10, 2, 2});
  Tensor targets = ints({2, 4}, {5, 9, 3, 7, 10, 2, 2, 4});
  check(*module, {tokens, targets}, 1e-5, 1e-7);
}

TEST_F(AutodiffModelTest, MlpMatchesFiniteDifferences) {
  MlpConfig config;
  config.sizes = {5, 4, 3};
  config.batch = 3;
  OwningOpRef<ModuleOp> module = buildMlp(context, config);
  Tensor features({3, 5});
  for (int64_t i = 0; i < features.numElements(); ++i)
    features.data[i] = std::sin(0.7 * i);
  check(*module, {features, ints({3}, {0, 2, 1})});
}

TEST_P(AutodiffTest, MatchesFiniteDifferences) {
  const Case &c = GetParam();
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(c.program, &context);
  ASSERT_TRUE(module) << c.name;
  check(*module, c.args);
}

/// Wraps `body` (which defines %y of type `yType` from the parameters) in a
/// program with loss sum(%y * R).
std::string program(const std::string &params, const std::string &body,
                    const std::string &yType, const std::string &args = "",
                    int yRank = 2) {
  std::string dims;
  for (int i = 0; i < yRank; ++i)
    dims += (i ? ", " : "") + std::to_string(i);
  return params + "\nstrata.param @R : " + yType +
         " init <normal, 1.0> {frozen}\n"
         "func.func @train_step(" +
         args + ") -> tensor<f64> {\n" + body +
         "\n  %r = strata.get_param @R : " + yType +
         "\n  %m = strata.mul %y, %r : (" + yType + ", " + yType + ") -> " +
         yType + "\n  %l = strata.reduce_sum %m {dims = array<i64: " + dims +
         ">} : (" + yType + ") -> tensor<f64>\n  return %l : tensor<f64>\n}\n";
}

std::vector<Case> cases() {
  static std::vector<std::string> texts;
  std::vector<Case> v;
  auto add = [&](const char *name, std::string text,
                 std::vector<Tensor> args = {}) {
    texts.push_back(std::move(text));
    v.push_back({name, nullptr, std::move(args)});
  };
  const std::string ab =
      "strata.param @a : tensor<3x4xf64> init <normal, 1.0>\n"
      "strata.param @b : tensor<4xf64> init <normal, 1.0>\n";
  const std::string get_ab =
      "  %a = strata.get_param @a : tensor<3x4xf64>\n"
      "  %b = strata.get_param @b : tensor<4xf64>\n";
  add("matmul_batched_broadcast",
      program("strata.param @x : tensor<2x3x4xf64> init <normal, 1.0>\n"
              "strata.param @w : tensor<4x5xf64> init <normal, 1.0>",
              "  %x = strata.get_param @x : tensor<2x3x4xf64>\n"
              "  %w = strata.get_param @w : tensor<4x5xf64>\n"
              "  %y = strata.matmul %x, %w : (tensor<2x3x4xf64>, "
              "tensor<4x5xf64>) -> tensor<2x3x5xf64>",
              "tensor<2x3x5xf64>", "", 3));
  add("matmul_transposed",
      program("strata.param @x : tensor<4x3xf64> init <normal, 1.0>\n"
              "strata.param @w : tensor<5x4xf64> init <normal, 1.0>",
              "  %x = strata.get_param @x : tensor<4x3xf64>\n"
              "  %w = strata.get_param @w : tensor<5x4xf64>\n"
              "  %y = strata.matmul %x, %w {transpose_lhs, transpose_rhs} : "
              "(tensor<4x3xf64>, tensor<5x4xf64>) -> tensor<3x5xf64>",
              "tensor<3x5xf64>"));
  for (const char *op : {"add", "sub", "mul", "div"})
    add(op, program(ab, get_ab + "  %y = strata." + op +
                            " %a, %b : (tensor<3x4xf64>, tensor<4xf64>) -> "
                            "tensor<3x4xf64>",
                    "tensor<3x4xf64>"));
  add("scale", program(ab, get_ab + "  %y = strata.scale %a {factor = -2.5 : "
                                    "f64} : (tensor<3x4xf64>) -> tensor<3x4xf64>",
                       "tensor<3x4xf64>"));
  add("bias_add", program(ab, get_ab + "  %y = strata.bias_add %a, %b : "
                                       "(tensor<3x4xf64>, tensor<4xf64>) -> "
                                       "tensor<3x4xf64>",
                          "tensor<3x4xf64>"));
  add("relu", program(ab, get_ab + "  %y = strata.relu %a : (tensor<3x4xf64>) "
                                   "-> tensor<3x4xf64>",
                      "tensor<3x4xf64>"));
  add("gelu_erf", program(ab, get_ab + "  %y = strata.gelu %a : "
                                       "(tensor<3x4xf64>) -> tensor<3x4xf64>",
                          "tensor<3x4xf64>"));
  add("gelu_tanh",
      program(ab, get_ab + "  %y = strata.gelu %a {approximate = "
                           "#strata.gelu<tanh>} : (tensor<3x4xf64>) -> "
                           "tensor<3x4xf64>",
              "tensor<3x4xf64>"));
  add("silu", program(ab,
                      get_ab + "  %y = strata.silu %a : (tensor<3x4xf64>) "
                               "-> tensor<3x4xf64>",
                      "tensor<3x4xf64>"));
  add("tanh", program(ab,
                      get_ab + "  %y = strata.tanh %a : (tensor<3x4xf64>) "
                               "-> tensor<3x4xf64>",
                      "tensor<3x4xf64>"));
  add("rsqrt",
      program(ab,
              get_ab + "  %sq = strata.mul %a, %a : (tensor<3x4xf64>, "
                       "tensor<3x4xf64>) -> tensor<3x4xf64>\n"
                       "  %y = strata.rsqrt %sq : (tensor<3x4xf64>) -> "
                       "tensor<3x4xf64>",
              "tensor<3x4xf64>"));
  add("dropout", program(ab, get_ab + "  %y = strata.dropout %a {key = 3 : "
                                      "i64, prob = 0.5 : f64} : "
                                      "(tensor<3x4xf64>) -> tensor<3x4xf64>",
                         "tensor<3x4xf64>"));
  add("softmax", program(ab, get_ab + "  %y = strata.softmax %a : "
                                      "(tensor<3x4xf64>) -> tensor<3x4xf64>",
                         "tensor<3x4xf64>"));
  add("softmax_causal",
      program("strata.param @s : tensor<2x3x3xf64> init <normal, 1.0>",
              "  %s = strata.get_param @s : tensor<2x3x3xf64>\n"
              "  %y = strata.softmax %s {causal} : (tensor<2x3x3xf64>) -> "
              "tensor<2x3x3xf64>",
              "tensor<2x3x3xf64>", "", 3));
  add("layer_norm",
      program(ab + "strata.param @g : tensor<4xf64> init <normal, 1.0>",
              get_ab + "  %g = strata.get_param @g : tensor<4xf64>\n"
                       "  %y = strata.layer_norm %a, %g, %b : "
                       "(tensor<3x4xf64>, tensor<4xf64>, tensor<4xf64>) -> "
                       "tensor<3x4xf64>",
              "tensor<3x4xf64>"));
  add("rms_norm",
      program(ab + "strata.param @g : tensor<4xf64> init <normal, 1.0>",
              get_ab + "  %g = strata.get_param @g : tensor<4xf64>\n"
                       "  %y = strata.rms_norm %a, %g : "
                       "(tensor<3x4xf64>, tensor<4xf64>) -> tensor<3x4xf64>",
              "tensor<3x4xf64>"));
  add("embedding",
      program("strata.param @t : tensor<5x3xf64> init <normal, 1.0>",
              "  %t = strata.get_param @t : tensor<5x3xf64>\n"
              "  %y = strata.embedding %t, %ids : (tensor<5x3xf64>, "
              "tensor<2x2xi32>) -> tensor<2x2x3xf64>",
              "tensor<2x2x3xf64>", "%ids: tensor<2x2xi32>", 3),
      {ints({2, 2}, {1, 4, 1, 0})});
  add("reshape_transpose",
      program(ab, get_ab + "  %rs = strata.reshape %a : (tensor<3x4xf64>) -> "
                           "tensor<3x2x2xf64>\n"
                           "  %y = strata.transpose %rs {permutation = "
                           "array<i64: 2, 0, 1>} : (tensor<3x2x2xf64>) -> "
                           "tensor<2x3x2xf64>",
              "tensor<2x3x2xf64>", "", 3));
  add("slice_middle",
      program(ab,
              get_ab + "  %y = strata.slice %a {dim = 1 : i64, start = 1 "
                       ": i64, size = 2 : i64} : (tensor<3x4xf64>) -> "
                       "tensor<3x2xf64>",
              "tensor<3x2xf64>"));
  // Strided slices: the gradient has zeros between the elements, cut
  // where the dimension ends (odd columns; every third from 0, whose
  // spread-out gradient is longer than the dimension) or not (even ones).
  for (auto [name, start, stride] : {std::tuple{"slice_strided_odd", 1, 2},
                                     {"slice_strided_even", 0, 2},
                                     {"slice_strided_third", 0, 3}})
    add(name, program(ab,
                      get_ab +
                          "  %y = strata.slice %a {dim = 1 : i64, "
                          "start = " +
                          std::to_string(start) +
                          " : i64, size = 2 : i64, stride = " +
                          std::to_string(stride) +
                          " : i64} : (tensor<3x4xf64>) -> "
                          "tensor<3x2xf64>",
                      "tensor<3x2xf64>"));
  add("slice_strided_rows",
      program(ab,
              get_ab + "  %y = strata.slice %a {dim = 0 : i64, start = 0 "
                       ": i64, size = 2 : i64, stride = 2 : i64} : "
                       "(tensor<3x4xf64>) -> tensor<2x4xf64>",
              "tensor<2x4xf64>"));
  add("pad", program(ab,
                     get_ab + "  %y = strata.pad %a {dim = 0 : i64, low = 2 : "
                              "i64, high = 1 : i64} : (tensor<3x4xf64>) -> "
                              "tensor<6x4xf64>",
                     "tensor<6x4xf64>"));
  // %a's two halves, %lo and %hi.
  const std::string halves =
      "  %lo = strata.slice %a {dim = 1 : i64, start = 0 : i64, size = 2 : "
      "i64} : (tensor<3x4xf64>) -> tensor<3x2xf64>\n"
      "  %hi = strata.slice %a {dim = 1 : i64, start = 2 : i64, size = 2 : "
      "i64} : (tensor<3x4xf64>) -> tensor<3x2xf64>\n";
  add("concat_slices",
      program(ab,
              get_ab + halves +
                  "  %y = strata.concat %hi, %a, %lo {dim = 1 : i64} "
                  ": (tensor<3x2xf64>, tensor<3x4xf64>, "
                  "tensor<3x2xf64>) -> tensor<3x8xf64>",
              "tensor<3x8xf64>"));
  // Slices that cover %a (their gradients one concat), multiplied.
  add("split_covering",
      program(ab,
              get_ab + halves +
                  "  %y = strata.mul %lo, %hi : (tensor<3x2xf64>, "
                  "tensor<3x2xf64>) -> tensor<3x2xf64>",
              "tensor<3x2xf64>"));
  add("reduce_sum_mean",
      program(ab, get_ab + "  %s = strata.reduce_sum %a {dims = array<i64: "
                           "1>} : (tensor<3x4xf64>) -> tensor<3xf64>\n"
                           "  %k = strata.reduce_mean %a {dims = array<i64: "
                           "0>, keep_dims} : (tensor<3x4xf64>) -> "
                           "tensor<1x4xf64>\n"
                           "  %s2 = strata.reshape %s : (tensor<3xf64>) -> "
                           "tensor<3x1xf64>\n"
                           "  %y = strata.mul %s2, %k : (tensor<3x1xf64>, "
                           "tensor<1x4xf64>) -> tensor<3x4xf64>",
              "tensor<3x4xf64>"));
  add("broadcast_to_sum_to",
      program(ab, get_ab + "  %bb = strata.broadcast_to %b : (tensor<4xf64>) "
                           "-> tensor<3x4xf64>\n"
                           "  %p = strata.mul %bb, %a : (tensor<3x4xf64>, "
                           "tensor<3x4xf64>) -> tensor<3x4xf64>\n"
                           "  %y = strata.sum_to %p : (tensor<3x4xf64>) -> "
                           "tensor<1x4xf64>",
              "tensor<1x4xf64>"));
  add("cross_entropy",
      "strata.param @l : tensor<2x3x5xf64> init <normal, 1.0>\n"
      "func.func @train_step(%labels: tensor<2x3xi32>) -> tensor<f64> {\n"
      "  %l = strata.get_param @l : tensor<2x3x5xf64>\n"
      "  %y = strata.cross_entropy %l, %labels : (tensor<2x3x5xf64>, "
      "tensor<2x3xi32>) -> tensor<f64>\n"
      "  return %y : tensor<f64>\n}\n",
      {ints({2, 3}, {0, 4, 2, 1, 1, 3})});
  add("fused_gemm_gelu",
      program("strata.param @x : tensor<3x4xf64> init <normal, 1.0>\n"
              "strata.param @w : tensor<4x5xf64> init <normal, 1.0>\n"
              "strata.param @c : tensor<5xf64> init <normal, 1.0>",
              "  %x = strata.get_param @x : tensor<3x4xf64>\n"
              "  %w = strata.get_param @w : tensor<4x5xf64>\n"
              "  %c = strata.get_param @c : tensor<5xf64>\n"
              "  %y, %aux = strata.fused_gemm_epilogue %x, %w, %c {activation "
              "= #strata.activation<gelu_tanh>, with_aux} : (tensor<3x4xf64>, "
              "tensor<4x5xf64>, tensor<5xf64>) -> (tensor<3x5xf64>, "
              "tensor<3x5xf64>)",
              "tensor<3x5xf64>"));
  add("fused_gemm_relu_transposed_weight",
      program("strata.param @x : tensor<3x4xf64> init <normal, 1.0>\n"
              "strata.param @w : tensor<5x4xf64> init <normal, 1.0>\n"
              "strata.param @c : tensor<5xf64> init <normal, 1.0>",
              "  %x = strata.get_param @x : tensor<3x4xf64>\n"
              "  %w = strata.get_param @w : tensor<5x4xf64>\n"
              "  %c = strata.get_param @c : tensor<5xf64>\n"
              "  %y, %aux = strata.fused_gemm_epilogue %x, %w, %c {activation "
              "= #strata.activation<gelu_erf>, with_aux, transpose_weight} : "
              "(tensor<3x4xf64>, tensor<5x4xf64>, tensor<5xf64>) -> "
              "(tensor<3x5xf64>, tensor<3x5xf64>)",
              "tensor<3x5xf64>"));
  add("fused_dropout_add",
      program(ab + "strata.param @c : tensor<3x4xf64> init <normal, 1.0>",
              get_ab + "  %c = strata.get_param @c : tensor<3x4xf64>\n"
                       "  %y = strata.fused_dropout_add %a, %c {key = 1 : i64, "
                       "prob = 0.25 : f64} : (tensor<3x4xf64>, "
                       "tensor<3x4xf64>) -> tensor<3x4xf64>",
              "tensor<3x4xf64>"));
  // [batch, sequence, heads, head size]; the log-sum-exp [batch, heads,
  // sequence].
  add("attention_causal",
      program("strata.param @q : tensor<1x4x2x3xf64> init <normal, 1.0>\n"
              "strata.param @k : tensor<1x4x2x3xf64> init <normal, 1.0>\n"
              "strata.param @v : tensor<1x4x2x2xf64> init <normal, 1.0>",
              "  %q = strata.get_param @q : tensor<1x4x2x3xf64>\n"
              "  %k = strata.get_param @k : tensor<1x4x2x3xf64>\n"
              "  %v = strata.get_param @v : tensor<1x4x2x2xf64>\n"
              "  %y, %lse = strata.attention %q, %k, %v {causal, scale = 0.5 "
              ": f64} : (tensor<1x4x2x3xf64>, tensor<1x4x2x3xf64>, "
              "tensor<1x4x2x2xf64>) -> (tensor<1x4x2x2xf64>, "
              "tensor<1x2x4xf64>)",
              "tensor<1x4x2x2xf64>", "", 4));
  add("attention_cross",
      program("strata.param @q : tensor<2x3x2x4xf64> init <normal, 1.0>\n"
              "strata.param @k : tensor<2x5x2x4xf64> init <normal, 1.0>\n"
              "strata.param @v : tensor<2x5x2x3xf64> init <normal, 1.0>",
              "  %q = strata.get_param @q : tensor<2x3x2x4xf64>\n"
              "  %k = strata.get_param @k : tensor<2x5x2x4xf64>\n"
              "  %v = strata.get_param @v : tensor<2x5x2x3xf64>\n"
              "  %y, %lse = strata.attention %q, %k, %v {scale = 1.0 : f64} : "
              "(tensor<2x3x2x4xf64>, tensor<2x5x2x4xf64>, tensor<2x5x2x3xf64>) "
              "-> (tensor<2x3x2x3xf64>, tensor<2x2x3xf64>)",
              "tensor<2x3x2x3xf64>", "", 4));
  // Grouped-query attention: three query heads share one key and value
  // head, whose gradients sum over them.
  add("attention_grouped",
      program("strata.param @q : tensor<1x4x3x3xf64> init <normal, 1.0>\n"
              "strata.param @k : tensor<1x4x1x3xf64> init <normal, 1.0>\n"
              "strata.param @v : tensor<1x4x1x2xf64> init <normal, 1.0>",
              "  %q = strata.get_param @q : tensor<1x4x3x3xf64>\n"
              "  %k = strata.get_param @k : tensor<1x4x1x3xf64>\n"
              "  %v = strata.get_param @v : tensor<1x4x1x2xf64>\n"
              "  %y, %lse = strata.attention %q, %k, %v {causal, scale = 0.5 "
              ": f64} : (tensor<1x4x3x3xf64>, tensor<1x4x1x3xf64>, "
              "tensor<1x4x1x2xf64>) -> (tensor<1x4x3x2xf64>, "
              "tensor<1x3x4xf64>)",
              "tensor<1x4x3x2xf64>", "", 4));
  add("shared_param_summed",
      program(ab, get_ab + "  %p = strata.mul %a, %a : (tensor<3x4xf64>, "
                           "tensor<3x4xf64>) -> tensor<3x4xf64>\n"
                           "  %a2 = strata.get_param @a : tensor<3x4xf64>\n"
                           "  %y = strata.add %p, %a2 : (tensor<3x4xf64>, "
                           "tensor<3x4xf64>) -> tensor<3x4xf64>",
              "tensor<3x4xf64>"));
  for (size_t i = 0; i < v.size(); ++i)
    v[i].program = texts[i].c_str();
  return v;
}

INSTANTIATE_TEST_SUITE_P(Ops, AutodiffTest, ::testing::ValuesIn(cases()),
                         [](const auto &info) {
                           return std::string(info.param.name);
                         });

} // namespace
