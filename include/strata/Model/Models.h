//===- Models.h - Reference models: MLP and GPT-2 ---------------*- C++ -*-===//

#ifndef STRATA_MODEL_MODELS_H
#define STRATA_MODEL_MODELS_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <vector>

namespace strata {

/// The loss of the MLP.
enum class MlpLoss {
  /// A classifier: (features, labels), mean cross-entropy.
  CrossEntropy,
  /// A regression: (features, targets), the squared errors' mean over
  /// every element, or their sum.
  MeanSquared,
  SumSquared,
};

/// A ReLU MLP: sizes[0] inputs, hidden layers, sizes.back() classes or
/// outputs, the loss of `loss`.
struct MlpConfig {
  std::vector<int64_t> sizes = {784, 1024, 1024, 10};
  int64_t batch = 256;
  MlpLoss loss = MlpLoss::CrossEntropy;
};

/// A GPT-2 style decoder: learned position embeddings,
/// pre-LayerNorm blocks, causal self-attention, tanh-GELU MLP of 4h, final
/// LayerNorm, LM head tied to the token embedding, dropout after the
/// embeddings and the attention / MLP projections (`dropout`) and on the
/// attention probabilities (`attentionDropout`, GPT-2's attn_pdrop).
struct GptConfig {
  int64_t layers = 2;
  int64_t hidden = 64;
  int64_t heads = 4;
  int64_t seq = 32;
  int64_t vocab = 256;
  int64_t batch = 8;
  double dropout = 0.0;
  /// The transformer blocks under a mixed-precision guard (strata.amp_guard,
  /// Paddle's fp16_guard); the embeddings, final layer norm and head not.
  bool ampGuard = false;
  double attentionDropout = 0.0;
};

/// How the caller spells the config's fields in errors: strata-gen's flags
/// (`--hidden`) or an embedder's argument names (`hidden`).
enum class ConfigSpelling { Flags, Arguments };

llvm::Error validate(const MlpConfig &config,
                     ConfigSpelling spelling = ConfigSpelling::Flags);
llvm::Error validate(const GptConfig &config,
                     ConfigSpelling spelling = ConfigSpelling::Flags);

/// Builds the forward + loss program. The config must be valid.
mlir::OwningOpRef<mlir::ModuleOp> buildMlp(mlir::MLIRContext &context,
                                           const MlpConfig &config);
mlir::OwningOpRef<mlir::ModuleOp> buildGpt(mlir::MLIRContext &context,
                                           const GptConfig &config);

} // namespace strata

#endif // STRATA_MODEL_MODELS_H
