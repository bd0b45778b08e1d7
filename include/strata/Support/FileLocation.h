//===- FileLocation.h - The file, line and column of a location -*- C++ -*-===//
//
// Messages name an op's place as "file:line:col". A front end may wrap
// that place in a name (loc("fc1"("model.py":10:2))), a call site or a
// fused location; the place is the first file location nested in it.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_SUPPORT_FILELOCATION_H
#define STRATA_SUPPORT_FILELOCATION_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Location.h"
#include "llvm/ADT/Twine.h"

#include <string>

namespace strata {

/// "file:line:col" of `loc`, or of the first file location nested in it (a
/// name's, a call site's callee's, a fused location's first); "" when it
/// has none.
inline std::string fileLocation(mlir::Location loc) {
  auto file = loc->findInstanceOf<mlir::FileLineColLoc>();
  if (!file)
    return "";
  return (file.getFilename().getValue() + ":" + llvm::Twine(file.getLine()) +
          ":" + llvm::Twine(file.getColumn()))
      .str();
}

} // namespace strata

#endif // STRATA_SUPPORT_FILELOCATION_H
