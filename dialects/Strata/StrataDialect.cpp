//===- StrataDialect.cpp - Dialect, attributes, types, metadata ----------===//

#include "strata/Dialect/Strata.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

using namespace mlir;
using namespace strata;

#include "Strata/StrataDialect.cpp.inc"
#include "Strata/StrataEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "Strata/StrataAttrs.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "Strata/StrataTypes.cpp.inc"

void StrataDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "Strata/StrataOps.cpp.inc"
      >();
  registerAttributes();
  registerTypes();
}

void StrataDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "Strata/StrataAttrs.cpp.inc"
      >();
}

void StrataDialect::registerTypes() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "Strata/StrataTypes.cpp.inc"
      >();
}

LogicalResult InitAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               InitKind kind, FloatAttr scale) {
  bool needsScale = kind == InitKind::Normal || kind == InitKind::Uniform;
  if (needsScale && !(scale && scale.getValueAsDouble() > 0.0))
    return emitError() << "init '" << stringifyInitKind(kind)
                       << "' needs a positive scale";
  if (scale && !scale.getType().isF64())
    return emitError() << "init scale must be an f64 value";
  if (kind == InitKind::Constant &&
      !(scale && std::isfinite(scale.getValueAsDouble())))
    return emitError() << "init 'constant' needs its (finite) value";
  if (!needsScale && kind != InitKind::Constant && scale)
    return emitError() << "init '" << stringifyInitKind(kind)
                       << "' takes no scale";
  return success();
}

//===----------------------------------------------------------------------===//
// Metadata attributes
//===----------------------------------------------------------------------===//

static LogicalResult verifyNonNegativeIndex(Operation *op, NamedAttribute attr) {
  auto value = dyn_cast<IntegerAttr>(attr.getValue());
  if (!value || !value.getType().isInteger(64) || value.getInt() < 0)
    return op->emitOpError() << "'" << attr.getName().getValue()
                             << "' must be a non-negative i64 integer";
  return success();
}

LogicalResult StrataDialect::verifyOperationAttribute(Operation *op,
                                                      NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kRoleAttrName) {
    if (!isa<RoleAttr>(attr.getValue()))
      return op->emitOpError()
             << "'" << name << "' must be a #strata.role<...> attribute";
    return success();
  }
  if (name == kStageAttrName || name == kMicroBatchAttrName ||
      name == kBucketAttrName)
    return verifyNonNegativeIndex(op, attr);
  if (name == kMicroBatchesAttrName || name == kShardsAttrName) {
    auto value = dyn_cast<IntegerAttr>(attr.getValue());
    if (!value || value.getInt() < 1)
      return op->emitOpError() << "'" << name << "' must be a positive integer";
    return success();
  }
  if (name == kAmpGuardAttrName) {
    if (!isa<UnitAttr>(attr.getValue()))
      return op->emitOpError() << "'" << name << "' must be a unit attribute";
    return success();
  }
  if (name == kLayerAttrName || name == kJobAttrName) {
    auto layer = dyn_cast<StringAttr>(attr.getValue());
    if (!layer || layer.getValue().empty())
      return op->emitOpError()
             << "'" << name << "' must be a non-empty string";
    return success();
  }
  if (name == kGradOfAttrName) {
    auto ref = dyn_cast<FlatSymbolRefAttr>(attr.getValue());
    if (!ref)
      return op->emitOpError()
             << "'" << name << "' must be a flat symbol reference";
    // Operations directly nested in a module are checked by their users.
    Operation *param = SymbolTable::lookupNearestSymbolFrom(op, ref);
    if (!param || !isa<ParamOp>(param))
      return op->emitOpError() << "'" << name << "' names " << ref
                               << ", which is not a strata.param";
    return success();
  }
  if (name == kLossScalingAttrName) {
    auto state = dyn_cast<StateOp>(op);
    auto config = dyn_cast<DictionaryAttr>(attr.getValue());
    if (!state || !config ||
        state.getTensorType() !=
            RankedTensorType::get({}, Float32Type::get(op->getContext())))
      return op->emitOpError()
             << "'" << name
             << "' must be a dictionary on an f32 scalar strata.state";
    auto positive = [&](StringRef key) {
      auto v = config.getAs<IntegerAttr>(key);
      return v && v.getInt() >= 1;
    };
    auto ratio = [&](StringRef key) -> double {
      auto v = config.getAs<FloatAttr>(key);
      return v ? v.getValueAsDouble() : NAN;
    };
    if (!positive("incr_every_n_steps") ||
        !positive("decr_every_n_nan_or_inf") || !(ratio("incr_ratio") > 1.0) ||
        !(ratio("decr_ratio") > 0.0 && ratio("decr_ratio") < 1.0) ||
        !config.getAs<FlatSymbolRefAttr>("good") ||
        !config.getAs<FlatSymbolRefAttr>("bad"))
      return op->emitOpError()
             << "'" << name
             << "' needs incr_every_n_steps and decr_every_n_nan_or_inf >= 1, "
                "incr_ratio > 1, decr_ratio in (0, 1) and the counters good "
                "and bad";
    return success();
  }
  // The job list of every pipeline stage (strata-pipeline), and the passes
  // a program has been through (Program.h).
  if (name == "strata.schedule" || name == StrataDialect::kPassesAttrName) {
    auto list = dyn_cast<ArrayAttr>(attr.getValue());
    if (!isa<ModuleOp>(op) || !list ||
        !llvm::all_of(list, [](Attribute a) { return isa<StringAttr>(a); }))
      return op->emitOpError()
             << "'" << name << "' must be an array of strings on a module";
    return success();
  }
  // The rank whose program this is (strata-sharding, strata-pipeline).
  if (name == StrataDialect::kRankAttrName) {
    auto rank = dyn_cast<IntegerAttr>(attr.getValue());
    if (!isa<ModuleOp>(op) || !rank || !rank.getType().isInteger(64) ||
        rank.getInt() < 0)
      return op->emitOpError()
             << "'" << name << "' must be a non-negative integer on a module";
    return success();
  }
  // The layout of a module lowered to the runtime (strata-lower-to-runtime).
  if (name.starts_with("strata.rt.")) {
    if (!isa<ModuleOp>(op))
      return op->emitOpError() << "'" << name << "' belongs on a module";
    if (name == "strata.rt.arena_bytes" || name == "strata.rt.shards" ||
        name == "strata.rt.abi_version")
      return success(isa<IntegerAttr>(attr.getValue()));
    if (name == "strata.rt.persistent" || name == "strata.rt.sites" ||
        name == "strata.rt.site_roles")
      return success(isa<ArrayAttr>(attr.getValue()));
  }
  return op->emitOpError() << "unknown Strata attribute '" << name << "'";
}

LogicalResult StrataDialect::verifyRegionArgAttribute(Operation *op, unsigned,
                                                      unsigned argIndex,
                                                      NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kInputNameAttrName) {
    auto text = dyn_cast<StringAttr>(attr.getValue());
    if (!text || text.getValue().empty())
      return op->emitOpError() << "argument " << argIndex << ": '" << name
                               << "' must be a non-empty string";
    // (The name reaches C strings, messages and data files' keys.)
    if (llvm::any_of(text.getValue(), [](char c) {
          return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
        }))
      return op->emitOpError() << "argument " << argIndex << ": '" << name
                               << "' holds a control character (a NUL, a "
                                  "newline): names are printable text";
    return success();
  }
  return op->emitOpError() << "argument " << argIndex
                           << ": unknown Strata attribute '" << name
                           << "' (an argument takes '" << kInputNameAttrName
                           << "')";
}

LogicalResult StrataDialect::verifyRegionResultAttribute(Operation *op,
                                                         unsigned,
                                                         unsigned resultIndex,
                                                         NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kGradOfAttrName) {
    if (!isa<FlatSymbolRefAttr>(attr.getValue()))
      return op->emitOpError() << "result " << resultIndex << ": '" << name
                               << "' must be a flat symbol reference";
    return success();
  }
  return op->emitOpError() << "result " << resultIndex
                           << ": unknown Strata attribute '" << name
                           << "' (a result takes '" << kGradOfAttrName << "')";
}

LogicalResult strata::verifyKnownAttributes(Operation *op) {
  for (NamedAttribute attr : op->getDiscardableAttrs()) {
    StringRef name = attr.getName().getValue();
    if (name.contains('.'))
      continue; // a dialect's, checked by that dialect
    InFlightDiagnostic diag = op->emitOpError()
                              << "has no attribute '" << name << "'";
    ArrayRef<StringAttr> own = op->getName().getAttributeNames();
    StringRef nearest;
    unsigned best = 3; // at most two edits away
    for (StringAttr candidate : own) {
      unsigned distance = name.edit_distance(candidate.getValue(), true, best);
      if (distance < best) {
        best = distance;
        nearest = candidate.getValue();
      }
    }
    if (!nearest.empty())
      diag << "; did you mean '" << nearest << "'?";
    else if (own.empty())
      diag << " (it takes none)";
    else {
      diag << " (it takes ";
      llvm::interleave(
          own, diag, [&](StringAttr a) { diag << "'" << a.getValue() << "'"; },
          ", ");
      diag << ")";
    }
    return diag;
  }
  return success();
}

std::optional<Role> strata::getRole(Operation *op) {
  if (auto role = op->getAttrOfType<RoleAttr>(StrataDialect::kRoleAttrName))
    return role.getValue();
  return std::nullopt;
}

void strata::setRole(Operation *op, Role role) {
  op->setAttr(StrataDialect::kRoleAttrName,
              RoleAttr::get(op->getContext(), role));
}

static std::optional<int64_t> getIndexAttr(Operation *op, StringRef name) {
  if (auto attr = op->getAttrOfType<IntegerAttr>(name))
    return attr.getInt();
  return std::nullopt;
}

std::optional<int64_t> strata::getStage(Operation *op) {
  return getIndexAttr(op, StrataDialect::kStageAttrName);
}

std::optional<int64_t> strata::getMicroBatch(Operation *op) {
  return getIndexAttr(op, StrataDialect::kMicroBatchAttrName);
}

bool strata::readsOnlyType(OpOperand &use) {
  auto grad = dyn_cast<ReduceGradOp>(use.getOwner());
  return grad && &use == &grad.getInputMutable();
}

StringRef strata::getLayer(Operation *op) {
  if (auto layer = op->getAttrOfType<StringAttr>(StrataDialect::kLayerAttrName))
    return layer.getValue();
  return StringRef();
}

FlatSymbolRefAttr strata::getGradOf(Operation *op) {
  return op->getAttrOfType<FlatSymbolRefAttr>(StrataDialect::kGradOfAttrName);
}
