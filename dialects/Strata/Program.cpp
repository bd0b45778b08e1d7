//===- Program.cpp - The shape of a Strata training program ---------------===//

#include "strata/Dialect/Program.h"
#include "strata/Dialect/Strata.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"

using namespace mlir;

llvm::Expected<func::FuncOp> strata::findStepFunction(ModuleOp module) {
  if (auto named = module.lookupSymbol<func::FuncOp>(kStepFunctionName);
      named && !named.isExternal())
    return named;
  llvm::SmallVector<func::FuncOp> bodies;
  for (func::FuncOp func : module.getOps<func::FuncOp>())
    if (!func.isExternal())
      bodies.push_back(func);
  if (bodies.size() == 1)
    return bodies.front();
  std::string message;
  llvm::raw_string_ostream os(message);
  if (bodies.empty()) {
    os << "the program has no step function (a function named @"
       << kStepFunctionName << ", or the only function with a body)";
  } else {
    os << "the program has " << bodies.size() << " functions with a body (";
    llvm::interleaveComma(bodies, os,
                          [&](func::FuncOp f) { os << "@" << f.getSymName(); });
    os << ") and none is named @" << kStepFunctionName
       << ": which one is the step?";
  }
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

FailureOr<func::FuncOp> strata::getStepFunction(ModuleOp module,
                                                llvm::StringRef pass) {
  llvm::Expected<func::FuncOp> step = findStepFunction(module);
  if (step) {
    // Every pass walks the step as one block whose func.return yields the
    // loss (and, once differentiated, the gradients).
    Region &body = step->getBody();
    if (!llvm::hasSingleElement(body)) {
      step->emitError() << pass << ": the step function @" << step->getSymName()
                        << " has " << llvm::range_size(body)
                        << " blocks; a step is one block that ends in "
                           "func.return";
      return failure();
    }
    Block &block = body.front();
    if (block.empty() || !isa<func::ReturnOp>(block.back())) {
      InFlightDiagnostic diag =
          block.empty() ? step->emitError() : block.back().emitError();
      diag << pass << ": the step function @" << step->getSymName()
           << " ends in "
           << (block.empty()
                   ? std::string("nothing")
                   : "'" + block.back().getName().getStringRef().str() + "'")
           << "; a step ends in func.return of its loss";
      return failure();
    }
    return *step;
  }
  emitError(module.getLoc())
      << pass << ": " << llvm::toString(step.takeError());
  return failure();
}

FailureOr<func::FuncOp> strata::getDifferentiatedStep(ModuleOp module,
                                                      llvm::StringRef pass,
                                                      llvm::StringRef order) {
  FailureOr<func::FuncOp> step = getStepFunction(module, pass);
  if (failed(step) || returnsGradients(*step))
    return step;
  step->emitError() << pass
                    << ": the step returns no gradients (run strata-autodiff "
                       "first"
                    << order << ")";
  return failure();
}

strata::RankGridOp strata::findRankGrid(ModuleOp module) {
  auto grids = module.getOps<RankGridOp>();
  return grids.empty() ? RankGridOp() : *grids.begin();
}

FailureOr<strata::RankGridOp> strata::getRankGrid(ModuleOp module,
                                                  llvm::StringRef pass) {
  if (RankGridOp grid = findRankGrid(module))
    return grid;
  emitError(module.getLoc())
      << pass
      << ": the program declares no strata.rank_grid; run strata-rank-grid "
         "first (e.g. --strata-rank-grid=\"dp=2\")";
  return failure();
}

strata::StateOp strata::findLossScaleState(ModuleOp module) {
  for (auto state : module.getOps<StateOp>())
    if (state->hasAttr(StrataDialect::kLossScalingAttrName))
      return state;
  return {};
}

bool strata::isCompiledStep(func::FuncOp func) {
  return returnsGradients(func) ||
         func.walk([](AssignOp) { return WalkResult::interrupt(); })
             .wasInterrupted();
}

bool strata::returnsGradients(func::FuncOp func) {
  return func.getNumResults() > 1 &&
         func.getResultAttr(1, StrataDialect::kGradOfAttrName);
}

LogicalResult strata::checkOnlyStepReadsSymbols(ModuleOp module,
                                                func::FuncOp step,
                                                llvm::StringRef pass) {
  for (auto other : module.getOps<func::FuncOp>()) {
    if (other == step)
      continue;
    WalkResult reads = other.walk([](Operation *op) {
      return isa<GetParamOp, GetStateOp>(op) ? WalkResult::interrupt()
                                             : WalkResult::advance();
    });
    if (reads.wasInterrupted())
      return other.emitError()
             << pass << ": @" << other.getSymName()
             << " reads parameters or state, which the program of one rank "
                "may not hold; only the step (@"
             << step.getSymName() << ") may read them";
  }
  return success();
}

void strata::recordPass(ModuleOp module, llvm::StringRef pass) {
  llvm::SmallVector<Attribute> passes;
  if (auto done =
          module->getAttrOfType<ArrayAttr>(StrataDialect::kPassesAttrName))
    passes.append(done.begin(), done.end());
  passes.push_back(StringAttr::get(module.getContext(), pass));
  module->setAttr(StrataDialect::kPassesAttrName,
                  ArrayAttr::get(module.getContext(), passes));
}

std::optional<double> strata::splatValue(DenseElementsAttr dense) {
  if (!dense.isSplat())
    return std::nullopt;
  if (isa<FloatType>(dense.getElementType()))
    return dense.getSplatValue<APFloat>().convertToDouble();
  return double(dense.getSplatValue<APInt>().getSExtValue());
}

LogicalResult strata::checkRunsBefore(ModuleOp module, llvm::StringRef pass,
                                      llvm::ArrayRef<llvm::StringRef> later) {
  auto done = module->getAttrOfType<ArrayAttr>(StrataDialect::kPassesAttrName);
  if (!done)
    return success();
  for (Attribute attr : done) {
    auto name = llvm::dyn_cast<StringAttr>(attr);
    if (!name || !llvm::is_contained(later, name.getValue()))
      continue;
    InFlightDiagnostic diag = emitError(module.getLoc()) << pass << ": ";
    if (name.getValue() == pass)
      diag << "the program has been through " << pass << " already (its '"
           << StrataDialect::kPassesAttrName
           << "' attribute records it); it runs once";
    else
      diag << "the program has been through " << name.getValue()
           << ", which runs after " << pass << "; run " << pass << " first";
    return diag;
  }
  return success();
}

LogicalResult strata::recordRank(ModuleOp module, llvm::StringRef pass,
                                 int64_t rank) {
  if (auto made =
          module->getAttrOfType<IntegerAttr>(StrataDialect::kRankAttrName)) {
    if (made.getInt() != rank)
      return emitError(module.getLoc())
             << pass << ": the program is rank " << made.getInt() << "'s (its '"
             << StrataDialect::kRankAttrName << "' attribute), not rank "
             << rank << "'s; give " << pass << " rank=" << made.getInt()
             << ", or start again from the "
             << "program before the passes that made it for one rank";
    return success();
  }
  module->setAttr(
      StrataDialect::kRankAttrName,
      IntegerAttr::get(IntegerType::get(module.getContext(), 64), rank));
  return success();
}
