//===- Models.cpp - Reference models: MLP and GPT-2 -----------------------===//

#include "strata/Model/Models.h"
#include "strata/Model/ProgramBuilder.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <cmath>

using namespace mlir;
using namespace strata;

static llvm::Error invalid(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// The most elements a generated tensor may have (2^48: a quarter of a
/// PiB of f32; products past it overflow the sizes downstream), and the
/// most GPT blocks (a program of 10,000 blocks takes seconds to build).
constexpr int64_t kMaxElements = int64_t(1) << 48;
constexpr int64_t kMaxLayers = 10000;

/// Whether the tensor of `dims` has at most kMaxElements elements.
static bool fits(std::initializer_list<int64_t> dims) {
  int64_t elements = 1;
  for (int64_t d : dims)
    if (llvm::MulOverflow(elements, d, elements) || elements > kMaxElements)
      return false;
  return true;
}

static llvm::Error tooLarge(llvm::StringRef flags,
                            llvm::StringRef what = "a tensor of") {
  bool one = !flags.contains(" and ");
  return invalid(flags + (one ? " makes " : " make ") + what +
                 " more than 2^48 elements");
}

/// A field as `spelling` names it: "--attention-dropout" or
/// "attention_dropout".
static std::string field(ConfigSpelling spelling, llvm::StringRef flag) {
  if (spelling == ConfigSpelling::Flags)
    return ("--" + flag).str();
  std::string name = flag.str();
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

llvm::Error strata::validate(const MlpConfig &config, ConfigSpelling spelling) {
  auto f = [&](llvm::StringRef flag) { return field(spelling, flag); };
  if (config.sizes.size() < 2)
    return invalid(f("sizes") + " needs at least an input and an output size");
  for (int64_t size : config.sizes)
    if (size < 1)
      return invalid(f("sizes") + " entries must be >= 1, got " +
                     llvm::Twine(size));
  if (config.batch < 1)
    return invalid(f("batch") + " must be >= 1");
  for (size_t i = 0; i + 1 < config.sizes.size(); ++i)
    if (!fits({config.sizes[i], config.sizes[i + 1]}))
      return tooLarge(f("sizes"));
  for (int64_t size : config.sizes)
    if (!fits({config.batch, size}))
      return tooLarge(f("batch") + " and " + f("sizes"));
  return llvm::Error::success();
}

llvm::Error strata::validate(const GptConfig &config, ConfigSpelling spelling) {
  auto f = [&](llvm::StringRef flag) { return field(spelling, flag); };
  if (config.layers < 1 || config.hidden < 1 || config.heads < 1 ||
      config.seq < 1 || config.vocab < 1 || config.batch < 1)
    return invalid(f("layers") + ", " + f("hidden") + ", " + f("heads") + ", " +
                   f("seq") + ", " + f("vocab") + " and " + f("batch") +
                   " must all be >= 1");
  if (config.hidden % config.heads != 0)
    return invalid(f("hidden") + " (" + llvm::Twine(config.hidden) +
                   ") must be divisible by " + f("heads") + " (" +
                   llvm::Twine(config.heads) + ")");
  if (config.layers > kMaxLayers)
    return invalid(f("layers") + " must be at most " + llvm::Twine(kMaxLayers) +
                   ", got " + llvm::Twine(config.layers));
  // The largest tensors: the MLP's weights, the embeddings, the logits,
  // the MLP's activations and the attention scores.
  const GptConfig &c = config;
  if (!fits({c.hidden, 4, c.hidden}))
    return tooLarge(f("hidden"));
  // (All the blocks' weights: twelve hidden x hidden matrices each.)
  if (!fits({c.layers, 12, c.hidden, c.hidden}))
    return tooLarge(f("layers") + " and " + f("hidden"), "blocks of");
  if (!fits({c.vocab, c.hidden}))
    return tooLarge(f("vocab") + " and " + f("hidden"));
  if (!fits({c.seq, c.hidden}))
    return tooLarge(f("seq") + " and " + f("hidden"));
  if (!fits({c.batch, c.seq, c.vocab}))
    return tooLarge(f("batch") + ", " + f("seq") + " and " + f("vocab"));
  if (!fits({c.batch, c.seq, 4, c.hidden}))
    return tooLarge(f("batch") + ", " + f("seq") + " and " + f("hidden"));
  if (!fits({c.batch, c.heads, c.seq, c.seq}))
    return tooLarge(f("batch") + ", " + f("heads") + " and " + f("seq"));
  if (!(config.dropout >= 0.0 && config.dropout < 1.0))
    return invalid(f("dropout") + " must be in [0, 1), got " +
                   llvm::formatv("{0}", config.dropout).str());
  if (!(config.attentionDropout >= 0.0 && config.attentionDropout < 1.0))
    return invalid(f("attention-dropout") + " must be in [0, 1), got " +
                   llvm::formatv("{0}", config.attentionDropout).str());
  return llvm::Error::success();
}

OwningOpRef<ModuleOp> strata::buildMlp(MLIRContext &context,
                                       const MlpConfig &config) {
  ProgramBuilder b(&context);
  int64_t batch = config.batch;
  bool regression = config.loss != MlpLoss::CrossEntropy;
  ValueRange inputs =
      b.beginStep({b.tensor({batch, config.sizes.front()}, b.f32()),
                   regression ? b.tensor({batch, config.sizes.back()}, b.f32())
                              : b.tensor({batch}, b.i32())},
                  {"features", regression ? "targets" : "labels"});
  Value x = inputs[0];
  size_t numLayers = config.sizes.size() - 1;
  for (size_t i = 0; i < numLayers; ++i) {
    int64_t in = config.sizes[i], out = config.sizes[i + 1];
    b.setScope(("fc" + llvm::Twine(i)).str());
    // PyTorch's nn.Linear bound for both weight and bias: 1/sqrt(fan_in).
    double bound = 1.0 / std::sqrt(static_cast<double>(in));
    Value w = b.param("weight", {in, out}, InitKind::Uniform, bound);
    Value bias = b.param("bias", {out}, InitKind::Uniform, bound);
    x = b.biasAdd(b.matmul(x, w), bias);
    if (i + 1 < numLayers)
      x = b.relu(x);
  }
  b.setScope("");
  if (!regression)
    return b.finish(b.crossEntropy(x, inputs[1]));
  Value error = b.sub(x, inputs[1]);
  return b.finish(b.reduceAll(b.mul(error, error),
                              /*mean=*/config.loss == MlpLoss::MeanSquared));
}

OwningOpRef<ModuleOp> strata::buildGpt(MLIRContext &context,
                                       const GptConfig &c) {
  ProgramBuilder b(&context);
  const int64_t B = c.batch, S = c.seq, H = c.hidden, A = c.heads,
                D = c.hidden / c.heads, V = c.vocab;
  const double std = 0.02;
  // GPT-2 scales the residual projections by 1/sqrt(2 * layers).
  const double projStd = std / std::sqrt(2.0 * c.layers);
  ValueRange inputs = b.beginStep(
      {b.tensor({B, S}, b.i32()), b.tensor({B, S}, b.i32())},
      {"tokens", "targets"});

  Value wte = b.param("wte", {V, H}, InitKind::Normal, std);
  // Every position 0..S-1 is used, so the position table adds directly.
  Value wpe = b.param("wpe", {S, H}, InitKind::Normal, std);
  Value x = b.dropout(b.add(b.embedding(wte, inputs[0]), wpe), c.dropout);

  auto linear = [&](Value in, StringRef name, int64_t fanIn, int64_t fanOut,
                    double initStd) {
    Value w = b.param((name + ".weight").str(), {fanIn, fanOut},
                      InitKind::Normal, initStd);
    Value bias = b.param((name + ".bias").str(), {fanOut}, InitKind::Zeros);
    return b.biasAdd(b.matmul(in, w), bias);
  };
  auto layerNorm = [&](Value in, StringRef name) {
    Value g = b.param((name + ".weight").str(), {H}, InitKind::Ones);
    Value beta = b.param((name + ".bias").str(), {H}, InitKind::Zeros);
    return b.layerNorm(in, g, beta);
  };
  // [B, S, H] -> [B, A, S, D]
  auto splitHeads = [&](Value in) {
    return b.transpose(b.reshape(in, {B, S, A, D}), {0, 2, 1, 3});
  };

  for (int64_t l = 0; l < c.layers; ++l) {
    b.setScope(("h" + llvm::Twine(l)).str());
    b.setAmpGuard(c.ampGuard);
    Value h = layerNorm(x, "ln_1");
    Value q = splitHeads(linear(h, "attn.q", H, H, std));
    Value k = splitHeads(linear(h, "attn.k", H, H, std));
    Value v = splitHeads(linear(h, "attn.v", H, H, std));
    Value scores = b.scale(b.matmul(q, k, false, /*transposeRhs=*/true),
                           1.0 / std::sqrt(static_cast<double>(D)));
    Value probs =
        b.dropout(b.softmax(scores, /*causal=*/true), c.attentionDropout);
    Value ctx = b.reshape(b.transpose(b.matmul(probs, v), {0, 2, 1, 3}),
                          {B, S, H});
    Value attn = linear(ctx, "attn.proj", H, H, projStd);
    x = b.add(x, b.dropout(attn, c.dropout));

    Value h2 = layerNorm(x, "ln_2");
    Value fc = b.gelu(linear(h2, "mlp.fc", H, 4 * H, std),
                      GeluApproximation::Tanh);
    Value proj = linear(fc, "mlp.proj", 4 * H, H, projStd);
    x = b.add(x, b.dropout(proj, c.dropout));
  }
  b.setScope("");
  b.setAmpGuard(false);
  x = layerNorm(x, "ln_f");
  // LM head tied to the token embedding: logits = x @ wte^T.
  Value logits = b.matmul(x, wte, false, /*transposeRhs=*/true);
  return b.finish(b.crossEntropy(logits, inputs[1]));
}
