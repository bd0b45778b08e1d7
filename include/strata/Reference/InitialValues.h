//===- InitialValues.h - Seeded initial parameters and state ----*- C++ -*-===//
//
// The initial value of every strata.param and strata.state of a program,
// as its `init` attribute says, drawn from the counter-based RNG keyed by
// the run's seed and the symbol's name: element i of a tensor is a function
// of (seed, name, i) alone. Backends take the values in chunks, computed on
// several threads, into their own storage and element type; nothing holds
// the whole state in doubles unless a caller asks for tensors.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_REFERENCE_INITIALVALUES_H
#define STRATA_REFERENCE_INITIALVALUES_H

#include "strata/Reference/Evaluator.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringMap.h"

#include <cstdint>
#include <string>
#include <vector>

namespace strata::reference {

/// A standard normal sample (Box-Muller of one Philox draw) of the stream
/// (seed, key, stream) at `index`.
double standardNormal(uint64_t seed, int64_t key, int64_t stream,
                      int64_t index);

class InitialValues {
public:
  /// The values of `module`'s parameters and state for `seed`. A master
  /// weight starts as its parameter (the same f32 values).
  InitialValues(mlir::ModuleOp module, uint64_t seed);

  /// The program's parameters and state, in declaration order.
  llvm::ArrayRef<std::string> names() const { return order; }
  /// Whether `name` is a parameter or state of the program.
  bool contains(llvm::StringRef name) const { return specs.contains(name); }
  /// The shape of `name` (which must be contained).
  const std::vector<int64_t> &shape(llvm::StringRef name) const;

  /// Calls `sink(begin, values, count)` over consecutive chunks of `name`'s
  /// elements (values[j] is element begin + j), on several threads at once
  /// for a large tensor: a sink writes only its chunk's elements. Values of
  /// f32, bf16 and f16 symbols are f32 values (a bf16 or f16 one is its f32
  /// value rounded where it is stored); they do not depend on the thread
  /// count.
  void generate(llvm::StringRef name,
                llvm::function_ref<void(int64_t begin, const double *values,
                                        int64_t count)>
                    sink) const;

  /// `name`'s values as a tensor.
  Tensor tensor(llvm::StringRef name) const;

private:
  struct Spec {
    std::vector<int64_t> shape;
    int64_t count = 0;
    /// The kind and scale of the `init` attribute that draws it (a master
    /// weight's parameter's), and its RNG key (that symbol's name's).
    int kind = 0;
    double scale = 0;
    int64_t key = 0;
    /// A float of at most 32 bits: values rounded to f32.
    bool toF32 = false;
  };
  void fill(const Spec &spec, int64_t begin, int64_t count, double *out) const;

  llvm::StringMap<Spec> specs;
  std::vector<std::string> order;
  uint64_t seed;
};

} // namespace strata::reference

#endif // STRATA_REFERENCE_INITIALVALUES_H
