//===- CpuExecutable.cpp - JIT of a lowered step on the CPU runtime -------===//

#include "strata/Execution/CpuExecutable.h"
#include "strata/Target/RuntimeTarget.h"
#include "strata/Dialect/Strata.h"
#include "strata/Model/ProgramBuilder.h"
#include "strata/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "llvm/ExecutionEngine/Orc/Mangling.h"
#include "llvm/Support/TargetSelect.h"

#include <cstdlib>
#include <cstring>
#include <functional>

using namespace mlir;
using namespace strata;
using llvm::createStringError;
using llvm::inconvertibleErrorCode;

namespace {

llvm::Error error(const llvm::Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
}

/// Lowers a clone of `module`; the clone holds the LLVM-dialect step.
FailureOr<OwningOpRef<ModuleOp>> lowerClone(ModuleOp module, bool trace) {
  DialectRegistry registry;
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  module->getContext()->appendDialectRegistry(registry);
  OwningOpRef<ModuleOp> lowered = module.clone();
  PassManager pm(module->getContext());
  StrataLowerToRuntimeOptions options;
  options.trace = trace;
  pm.addPass(createStrataLowerToRuntime(options));
  if (failed(pm.run(*lowered)))
    return failure();
  return lowered;
}

void initNativeTarget() {
  static bool done = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    return true;
  }();
  (void)done;
}

/// The module attributes the lowering sets, removed before translation.
struct Layout {
  std::vector<std::string> persistent, sites, siteRoles;
  int64_t arenaBytes = 0, shards = 1;
};

Layout takeLayout(ModuleOp lowered) {
  Layout layout;
  for (Attribute a :
       lowered->getAttrOfType<ArrayAttr>("strata.rt.persistent"))
    layout.persistent.push_back(cast<StringAttr>(a).str());
  for (Attribute a : lowered->getAttrOfType<ArrayAttr>("strata.rt.sites"))
    layout.sites.push_back(cast<StringAttr>(a).str());
  for (Attribute a :
       lowered->getAttrOfType<ArrayAttr>("strata.rt.site_roles"))
    layout.siteRoles.push_back(cast<StringAttr>(a).str());
  layout.arenaBytes =
      lowered->getAttrOfType<IntegerAttr>("strata.rt.arena_bytes").getInt();
  if (auto shards = lowered->getAttrOfType<IntegerAttr>("strata.rt.shards"))
    layout.shards = shards.getInt();
  for (StringRef name :
       {"strata.rt.persistent", "strata.rt.sites", "strata.rt.site_roles",
        "strata.rt.arena_bytes", "strata.rt.shards", "strata.rt.abi_version"})
    lowered->removeAttr(name);
  return layout;
}

/// Translates and compiles a lowered module; the runtime's kernels are
/// absolute symbols of the JIT.
llvm::Expected<std::unique_ptr<ExecutionEngine>>
createEngine(ModuleOp lowered, unsigned optLevel, bool objectDump) {
  initNativeTarget();
  ExecutionEngineOptions engineOptions;
  // `transformer` is a function_ref: the callable must outlive create().
  std::function<llvm::Error(llvm::Module *)> transformer =
      makeOptimizingTransformer(optLevel, 0, nullptr);
  engineOptions.transformer = transformer;
  engineOptions.enableObjectDump = objectDump;
  // No perf jitdump files in $TMPDIR/.debug for every run (MLIR's default).
  engineOptions.enablePerfNotificationListener = false;
  auto engine = ExecutionEngine::create(lowered, engineOptions);
  if (!engine)
    return error("code generation failed: " +
                 llvm::toString(engine.takeError()));
  (*engine)->registerSymbols([](llvm::orc::MangleAndInterner interner) {
    llvm::orc::SymbolMap map;
    size_t count = 0;
    const StrataRtSymbol *symbols = strata_rt_symbols(&count);
    for (size_t i = 0; i < count; ++i)
      map[interner(symbols[i].name)] = {
          llvm::orc::ExecutorAddr::fromPtr(symbols[i].address),
          llvm::JITSymbolFlags::Exported};
    return map;
  });
  return std::move(*engine);
}

} // namespace

CpuExecutable::~CpuExecutable() {
  for (auto *list : {&persistent, &inputs, &outputs})
    for (Buffer &b : *list)
      std::free(b.data);
  std::free(arena);
  if (context)
    strata_rt_destroy(context);
}

CpuExecutable::Buffer CpuExecutable::makeBuffer(std::string name, Type type) {
  auto tensor = cast<RankedTensorType>(type);
  Buffer b;
  b.name = std::move(name);
  b.shape.assign(tensor.getShape().begin(), tensor.getShape().end());
  // The lowering accepted the program, so its types have ABI codes.
  b.dtype = runtimeElementType(tensor.getElementType());
  assert(b.dtype >= 0 && "a type the lowering refuses");
  b.bytes = tensor.getNumElements() * strata_rt_element_bytes(b.dtype);
  // 64-byte aligned, as the arena; never zero-sized.
  b.data = std::aligned_alloc(64, (std::max<int64_t>(b.bytes, 1) + 63) / 64 * 64);
  std::memset(b.data, 0, b.bytes);
  return b;
}

llvm::Expected<std::unique_ptr<CpuExecutable>>
CpuExecutable::compile(ModuleOp module, const CpuOptions &options) {
  llvm::Expected<func::FuncOp> step = findStepFunction(module);
  if (!step)
    return step.takeError();
  auto lowered = lowerClone(module, options.trace);
  if (failed(lowered))
    return error("cannot lower the program to the CPU runtime");
  Layout layout = takeLayout(**lowered);

  std::unique_ptr<CpuExecutable> exe(new CpuExecutable);
  exe->sites = layout.sites;
  exe->siteRoles = layout.siteRoles;
  exe->arenaSize = layout.arenaBytes;
  exe->arena =
      std::aligned_alloc(64, (std::max<int64_t>(layout.arenaBytes, 1) + 63) / 64 * 64);
  for (const std::string &name : layout.persistent) {
    Operation *symbol = module.lookupSymbol(name);
    Type type = isa<ParamOp>(symbol) ? cast<ParamOp>(symbol).getType()
                                     : cast<StateOp>(symbol).getType();
    exe->persistent.push_back(makeBuffer(name, type));
  }
  for (BlockArgument arg : step->getArguments())
    exe->inputs.push_back(
        makeBuffer("argument " + std::to_string(arg.getArgNumber()),
                   arg.getType()));
  for (auto [i, type] : llvm::enumerate(step->getResultTypes()))
    exe->outputs.push_back(makeBuffer("result " + std::to_string(i), type));

  auto engine = createEngine(**lowered, options.optLevel, false);
  if (!engine)
    return engine.takeError();
  auto address = (*engine)->lookup("strata_step");
  if (!address)
    return error("the lowered module has no strata_step: " +
                 llvm::toString(address.takeError()));
  exe->function = reinterpret_cast<StrataRtStepFn>(*address);
  exe->engine = std::move(*engine);
  // The object of a lowering of another release would call kernels this
  // runtime does not have: refuse it before the first step.
  if (auto version = exe->engine->lookup("strata_step_abi_version");
      !version ||
      *reinterpret_cast<const int64_t *>(*version) != strata_rt_abi_version()) {
    if (!version)
      llvm::consumeError(version.takeError());
    return error("the lowered module was built for another runtime ABI "
                 "than this runtime's (" +
                 std::to_string(strata_rt_abi_version()) + ")");
  }
  StrataRtOptions rtOptions;
  strata_rt_default_options(&rtOptions);
  rtOptions.seed = options.seed;
  rtOptions.rank = options.rank;
  rtOptions.shard = options.rank % layout.shards;
  rtOptions.threads = options.threads;
  char message[256] = {0};
  exe->context = strata_rt_create(&rtOptions, message, sizeof(message));
  if (!exe->context)
    return error(std::string("cannot create the CPU runtime: ") + message);
  strata_rt_enable_trace(exe->context, options.trace);
  const RuntimeCallbacks &comm = options.communication;
  if (comm.collective)
    strata_rt_set_collectives(exe->context, comm.collective, comm.wait,
                              comm.collectiveUser);
  if (comm.send && comm.recv)
    strata_rt_set_point_to_point(exe->context, comm.send, comm.recv,
                                 comm.pointToPointUser);
  return exe;
}

llvm::Error CpuExecutable::emitObject(ModuleOp module, llvm::StringRef path) {
  auto lowered = lowerClone(module, /*trace=*/false);
  if (failed(lowered))
    return error("cannot lower the program to the CPU runtime");
  takeLayout(**lowered);
  auto engine = createEngine(**lowered, 2, /*objectDump=*/true);
  if (!engine)
    return engine.takeError();
  // Materialise the code, then write the object.
  if (auto address = (*engine)->lookup("strata_step"); !address)
    return error(llvm::toString(address.takeError()));
  (*engine)->dumpToObjectFile(path);
  if (!llvm::sys::fs::exists(path))
    return error("cannot write " + path);
  return llvm::Error::success();
}

llvm::Error
CpuExecutable::setState(const llvm::StringMap<reference::Tensor> &state) {
  for (Buffer &b : persistent) {
    auto it = state.find(b.name);
    if (it == state.end())
      return error("no value for '" + b.name + "'");
    const reference::Tensor &t = it->second;
    if (t.shape != b.shape)
      return error("'" + b.name + "' has the wrong shape");
    writeHostBuffer(t, b.dtype, b.data);
  }
  return llvm::Error::success();
}

void CpuExecutable::getState(llvm::StringMap<reference::Tensor> &state) const {
  for (const Buffer &b : persistent)
    state[b.name] = readHostBuffer(b.shape, b.dtype, b.data);
}

const char *CpuExecutable::activeHostCall() const {
  int64_t site = strata_rt_active_site(context);
  return site >= 0 && site < int64_t(sites.size()) ? sites[site].c_str()
                                                   : nullptr;
}

std::vector<TraceEvent> CpuExecutable::takeTrace() {
  size_t count = 0;
  const StrataRtTraceEvent *events = strata_rt_take_trace(context, &count);
  std::vector<TraceEvent> result;
  result.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    int64_t site = events[i].site;
    bool known = site >= 0 && site < int64_t(sites.size());
    result.push_back({known ? sites[site] : "<unknown op>",
                      known ? siteRoles[site] : "", events[i].begin,
                      events[i].end});
  }
  return result;
}

double CpuExecutable::nowUs() const { return strata_rt_now_us(context); }

int64_t CpuExecutable::scratchBytes() const {
  return strata_rt_scratch_bytes(context);
}

llvm::Expected<std::vector<reference::Tensor>>
CpuExecutable::step(llvm::ArrayRef<reference::Tensor> args) {
  if (args.size() != inputs.size())
    return error("expected " + llvm::Twine(inputs.size()) +
                 " arguments, got " + llvm::Twine(args.size()));
  std::vector<void *> in, out, resident;
  for (auto [b, t] : llvm::zip(inputs, args)) {
    if (t.shape != b.shape)
      return error(b.name + " has the wrong shape");
    writeHostBuffer(t, b.dtype, b.data);
    in.push_back(b.data);
  }
  for (Buffer &b : outputs)
    out.push_back(b.data);
  for (Buffer &b : persistent)
    resident.push_back(b.data);
  strata_rt_clear_error(context);
  function(context, arena, resident.data(), in.data(), out.data());
  int64_t site = -1;
  if (const char *message = strata_rt_error(context, &site)) {
    std::string where = site >= 0 && site < int64_t(sites.size())
                            ? sites[site]
                            : "<unknown op>";
    return error(where + ": " + message);
  }
  std::vector<reference::Tensor> results;
  for (const Buffer &b : outputs)
    results.push_back(readHostBuffer(b.shape, b.dtype, b.data));
  return results;
}
