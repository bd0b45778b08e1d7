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
#include <cctype>
#include <cstdint>

namespace strata {

/// The text a nesting is counted in: JSON, YAML (single quotes quote too),
/// or MLIR (whose parser also recurses into `(` and `<`).
enum class NestingSyntax { Json, Yaml, Mlir };

/// Calls `f(i)` for each index i of `text` outside quoted strings (double
/// quotes; YAML's single quotes too) and MLIR's `//` comments, until it
/// returns false.
template <typename F>
void forEachCodeChar(llvm::StringRef text, NestingSyntax syntax, F f) {
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (quote) {
      if (c == '\\' && quote == '"')
        ++i;
      else if (c == quote)
        quote = 0;
      continue;
    }
    if (syntax == NestingSyntax::Mlir && c == '/' && i + 1 < text.size() &&
        text[i + 1] == '/') {
      // A comment, to the end of its line (brackets and quotes in it
      // nest nothing).
      size_t end = text.find('\n', i);
      i = end == llvm::StringRef::npos ? text.size() : end;
      continue;
    }
    if (c == '"' || (syntax == NestingSyntax::Yaml && c == '\''))
      quote = c;
    else if (!f(i))
      return;
  }
}

/// Whether the `<` or `>` at `i` of MLIR text is an angle bracket: not a
/// comparison (`<=`, `>=` of an affine set) nor an arrow's `->`.
inline bool isAngleBracket(llvm::StringRef text, size_t i) {
  if (i + 1 < text.size() && text[i + 1] == '=')
    return false;
  return text[i] == '<' || i == 0 || text[i - 1] != '-';
}

/// +1 where the character at `i` of `text` opens a bracket that nests the
/// parser (`[`, `{`; in MLIR also `(` and an angle bracket), -1 where it
/// closes one, 0 otherwise.
inline int bracketAt(llvm::StringRef text, size_t i, NestingSyntax syntax) {
  const bool mlir = syntax == NestingSyntax::Mlir;
  char c = text[i];
  if (c == '[' || c == '{' ||
      (mlir && (c == '(' || (c == '<' && isAngleBracket(text, i)))))
    return 1;
  if (c == ']' || c == '}' ||
      (mlir && (c == ')' || (c == '>' && isAngleBracket(text, i)))))
    return -1;
  return 0;
}

/// The deepest nesting of brackets (bracketAt) in `text`, outside quoted
/// strings and comments (forEachCodeChar). Stops counting past `limit`.
inline int64_t maxBracketNesting(llvm::StringRef text, NestingSyntax syntax,
                                 int64_t limit) {
  int64_t depth = 0, deepest = 0;
  forEachCodeChar(text, syntax, [&](size_t i) {
    int bracket = bracketAt(text, i, syntax);
    if (bracket > 0)
      deepest = std::max(deepest, ++depth);
    else if (bracket < 0 && depth > 0)
      --depth;
    return deepest <= limit;
  });
  return deepest;
}

/// The most operators (`+`, `-`, `*`, `floordiv`, `ceildiv`, `mod`, unary
/// minus, and an affine set's comparisons) of one `affine_map<...>` or
/// `affine_set<...>` attribute (space or comments may precede its `<`) in
/// the MLIR text `text`, outside quoted strings and comments. Stops
/// counting past `limit`.
inline int64_t maxAffineOperators(llvm::StringRef text, int64_t limit) {
  int64_t depth = 0, open = -1, count = 0, most = 0;
  // Just after affine_map or affine_set (from `keywordEnd`), before its `<`.
  bool keyword = false;
  size_t keywordEnd = 0;
  auto word = [&](size_t i, llvm::StringRef w) {
    auto ident = [](char c) { return std::isalnum(uint8_t(c)) || c == '_'; };
    return text.substr(i).starts_with(w) && (i == 0 || !ident(text[i - 1])) &&
           (i + w.size() >= text.size() || !ident(text[i + w.size()]));
  };
  forEachCodeChar(text, NestingSyntax::Mlir, [&](size_t i) {
    char c = text[i];
    int bracket = bracketAt(text, i, NestingSyntax::Mlir);
    if (keyword && i >= keywordEnd && !std::isspace(uint8_t(c))) {
      keyword = false;
      if (c == '<' && bracket > 0) {
        open = depth;
        count = 0;
      }
    }
    if (bracket > 0) {
      ++depth;
    } else if (bracket < 0) {
      if (depth > 0 && --depth == open) {
        most = std::max(most, count);
        open = -1;
      }
    } else if (open < 0) {
      if (word(i, "affine_map") || word(i, "affine_set")) {
        keyword = true;
        keywordEnd = i + 10;
      }
    } else if (c == '+' ||
               (c == '-' && !(i + 1 < text.size() && text[i + 1] == '>')) ||
               c == '*' ||
               ((c == '<' || c == '>' || c == '=') && i + 1 < text.size() &&
                text[i + 1] == '=') ||
               word(i, "floordiv") || word(i, "ceildiv") || word(i, "mod")) {
      most = std::max(most, ++count);
    }
    return most <= limit;
  });
  return most;
}

/// MLIR's parser recurses once per nested region (`{`), array attribute
/// (`[`), parenthesised type or location (`(`) and type or attribute
/// parameter list (`<`): a program text nested deeper than this is refused
/// before parsing. Real programs nest about ten levels; the bound leaves
/// the parser well inside a thread's stack of 1 MiB (an 8 MiB stack
/// overflowed at tens of thousands of levels, a 1 MiB one at 600).
constexpr int64_t kMaxProgramNesting = 200;
/// Its affine-expression parser recurses once per operator: an affine map
/// or set with more operators than this is refused before parsing too
/// (real ones have a few).
constexpr int64_t kMaxAffineOperators = 200;

/// Why the program text `text` (named `name`) is not parsed, or the empty
/// string: nested deeper than kMaxProgramNesting. Bytecode is not text and
/// is not checked.
inline std::string programNestingError(llvm::StringRef text,
                                       llvm::StringRef name) {
  if (mlir::isBytecode(llvm::MemoryBufferRef(text, name)))
    return "";
  if (maxBracketNesting(text, NestingSyntax::Mlir, kMaxProgramNesting) >
      kMaxProgramNesting)
    return (name + ": nested deeper than " + llvm::Twine(kMaxProgramNesting) +
            " levels of brackets ('{', '[', '(', '<'); no Strata program does")
        .str();
  if (maxAffineOperators(text, kMaxAffineOperators) > kMaxAffineOperators)
    return (name + ": an affine map or set with more than " +
            llvm::Twine(kMaxAffineOperators) +
            " operators in its expressions; no Strata program has one")
        .str();
  return "";
}

} // namespace strata

#endif // STRATA_SUPPORT_NESTING_H
