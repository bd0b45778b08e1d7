//===- Nesting.h - Bound the nesting of JSON and YAML text ------*- C++ -*-===//
//
// llvm::json's parser (and YAML flow collections) recurse once per level of
// `[` / `{`: a file of a few thousand levels overflows the stack. Inputs
// whose nesting is bounded by their format (a strategy, a safetensors
// header) are checked with this first.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_SUPPORT_NESTING_H
#define STRATA_SUPPORT_NESTING_H

#include "mlir/Bytecode/BytecodeReader.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/MemoryBufferRef.h"

#include <algorithm>
#include <cstdint>

namespace strata {

/// The deepest nesting of `[` and `{` in `text`, outside quoted strings
/// (JSON's double quotes; YAML's single quotes too when `yaml`). Stops
/// counting past `limit`.
inline int64_t maxBracketNesting(llvm::StringRef text, bool yaml,
                                 int64_t limit) {
  int64_t depth = 0, deepest = 0;
  char quote = 0;
  for (size_t i = 0; i < text.size() && deepest <= limit; ++i) {
    char c = text[i];
    if (quote) {
      if (c == '\\' && quote == '"')
        ++i;
      else if (c == quote)
        quote = 0;
      continue;
    }
    if (c == '"' || (yaml && c == '\''))
      quote = c;
    else if (c == '[' || c == '{')
      deepest = std::max(deepest, ++depth);
    else if ((c == ']' || c == '}') && depth > 0)
      --depth;
  }
  return deepest;
}

/// MLIR's parser recurses too, once per nested region (`{`) or array
/// attribute (`[`): a program text nested deeper than this is refused
/// before parsing (real programs nest a few levels; thousands overflow the
/// parser's stack).
constexpr int64_t kMaxProgramNesting = 1000;

/// Why the program text `text` (named `name`) is not parsed, or the empty
/// string: nested deeper than kMaxProgramNesting. Bytecode is not text and
/// is not checked.
inline std::string programNestingError(llvm::StringRef text,
                                       llvm::StringRef name) {
  if (mlir::isBytecode(llvm::MemoryBufferRef(text, name)))
    return "";
  if (maxBracketNesting(text, /*yaml=*/false, kMaxProgramNesting) <=
      kMaxProgramNesting)
    return "";
  return (name + ": nested deeper than " + llvm::Twine(kMaxProgramNesting) +
          " levels of '{' and '['; no Strata program does")
      .str();
}

} // namespace strata

#endif // STRATA_SUPPORT_NESTING_H
