//===- Fields.h - The strategy model as tables of fields --------*- C++ -*-===//
//
// Internal to lib/Strategy. Each section of a Strategy is described once by
// a table of fields (name + member pointer); the reader, the validation, the
// writers and the suggestions for misspelt keys all work from these tables.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_LIB_STRATEGY_FIELDS_H
#define STRATA_LIB_STRATEGY_FIELDS_H

#include "strata/Strategy/Strategy.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"

#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace strata::detail {

using StringList = std::vector<std::string>;
using IntList = std::vector<int64_t>;
using PatternList = std::vector<RefinedOpsPattern>;

/// A typed value read from the file, before it is stored in a field.
using Value = std::variant<bool, int64_t, double, std::string, StringList,
                           IntList, PatternList>;

/// A section of the strategy, with its fields, erased to what the reader
/// and writers need.
struct SectionInfo {
  llvm::StringRef name;
  std::vector<llvm::StringRef> keys;
  /// Kind of value a key holds (an index into the field pointer variant:
  /// bool, int64_t, double, optional<double>, string, StringList, IntList,
  /// PatternList).
  std::function<size_t(Strategy &, llvm::StringRef)> kindOf;
  std::function<void(Strategy &, llvm::StringRef, Value)> set;
  /// Writes `key: value` pairs through the callback.
  std::function<void(const Strategy &,
                     llvm::function_ref<void(llvm::StringRef, const Value &)>)>
      forEach;
};

/// Every section, in the order of the strategy model.
const std::vector<SectionInfo> &sections();

/// The section called `name`; null when there is none.
const SectionInfo *findSection(llvm::StringRef name);

/// The value of canonical key `path` ("section.key") in `s`.
std::optional<Value> valueOf(const Strategy &s, llvm::StringRef path);

/// The candidate closest to `word`, if it is close enough to be a typo.
std::optional<std::string> closest(llvm::StringRef word,
                                   llvm::ArrayRef<llvm::StringRef> candidates);

/// Paddle's defaults that depend on the optimizer type.
void fillOptimizerDefaults(OptimizerSection &o);

} // namespace strata::detail

#endif // STRATA_LIB_STRATEGY_FIELDS_H
