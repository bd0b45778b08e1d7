//===- JitExecutable.cpp - JIT of a lowered step against a runtime --------===//

#include "strata/Execution/JitExecutable.h"
#include "strata/Dialect/Strata.h"
#include "strata/Model/ProgramBuilder.h"
#include "strata/Passes/Passes.h"
#include "strata/Support/ReplaceFile.h"
#include "strata/Target/RuntimeTarget.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/Mangling.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Target/TargetMachine.h"

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
FailureOr<OwningOpRef<ModuleOp>> lowerClone(ModuleOp module, bool trace,
                                            StringRef target) {
  DialectRegistry registry;
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  module->getContext()->appendDialectRegistry(registry);
  OwningOpRef<ModuleOp> lowered = module.clone();
  PassManager pm(module->getContext());
  StrataLowerToRuntimeOptions options;
  options.trace = trace;
  options.target = target.str();
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
  for (Attribute a : lowered->getAttrOfType<ArrayAttr>("strata.rt.persistent"))
    layout.persistent.push_back(cast<StringAttr>(a).str());
  for (Attribute a : lowered->getAttrOfType<ArrayAttr>("strata.rt.sites"))
    layout.sites.push_back(cast<StringAttr>(a).str());
  for (Attribute a : lowered->getAttrOfType<ArrayAttr>("strata.rt.site_roles"))
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

/// The host's target machine for the step's machine code. The step is one
/// long block of runtime calls whose arguments are constants and buffer
/// addresses: the optimizing instruction selector and register allocator
/// buy it nothing and take time superlinear in its length (a 48-layer GPT's
/// 3700 calls: 5.4 s against 0.3 s), so code generation does not optimize
/// (the IR passes before it still run).
static llvm::Expected<std::unique_ptr<llvm::TargetMachine>>
stepTargetMachine(bool positionIndependent) {
  auto builder = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!builder)
    return builder.takeError();
  builder->setCodeGenOptLevel(llvm::CodeGenOptLevel::None);
  if (positionIndependent)
    builder->setRelocationModel(llvm::Reloc::PIC_)
        .setCodeModel(llvm::CodeModel::Small);
  return builder->createTargetMachine();
}

/// Translates and compiles a lowered module; the runtime's kernels are
/// absolute symbols of the JIT.
llvm::Expected<std::unique_ptr<ExecutionEngine>>
createEngine(ModuleOp lowered, unsigned optLevel,
             const RuntimeLibrary &runtime) {
  initNativeTarget();
  auto machine = stepTargetMachine(/*positionIndependent=*/false);
  if (!machine)
    return machine.takeError();
  ExecutionEngineOptions engineOptions;
  // `transformer` is a function_ref: the callable must outlive create().
  std::function<llvm::Error(llvm::Module *)> transformer =
      makeOptimizingTransformer(optLevel, 0, machine->get());
  engineOptions.transformer = transformer;
  // No perf jitdump files in $TMPDIR/.debug for every run (MLIR's default).
  engineOptions.enablePerfNotificationListener = false;
  auto engine =
      ExecutionEngine::create(lowered, engineOptions, std::move(*machine));
  if (!engine)
    return error("code generation failed: " +
                 llvm::toString(engine.takeError()));
  (*engine)->registerSymbols([&](llvm::orc::MangleAndInterner interner) {
    llvm::orc::SymbolMap map;
    size_t count = 0;
    const StrataRtSymbol *symbols = runtime.symbols(&count);
    for (size_t i = 0; i < count; ++i)
      map[interner(symbols[i].name)] = {
          llvm::orc::ExecutorAddr::fromPtr(symbols[i].address),
          llvm::JITSymbolFlags::Exported};
    return map;
  });
  return std::move(*engine);
}

} // namespace

JitExecutable::~JitExecutable() {
  if (!context)
    return;
  for (auto *list : {&persistent, &inputs, &outputs})
    for (Buffer &b : *list)
      runtime->free(context, b.data);
  runtime->free(context, arena);
  runtime->destroy(context);
}

llvm::Error JitExecutable::runtimeError(StringRef what) const {
  int64_t site = -1;
  const char *message = runtime->error(context, &site);
  if (!message)
    return llvm::Error::success();
  std::string where =
      site >= 0 && site < int64_t(sites.size()) ? sites[site] : what.str();
  return error(where + ": " + message);
}

llvm::Expected<JitExecutable::Buffer>
JitExecutable::makeBuffer(std::string name, Type type) {
  auto tensor = cast<RankedTensorType>(type);
  Buffer b;
  b.name = std::move(name);
  b.shape.assign(tensor.getShape().begin(), tensor.getShape().end());
  // The lowering accepted the program, so its types have ABI codes.
  b.dtype = runtimeElementType(tensor.getElementType());
  assert(b.dtype >= 0 && "a type the lowering refuses");
  b.bytes = tensor.getNumElements() * strata_rt_element_bytes(b.dtype);
  b.data = runtime->alloc(context, b.bytes);
  if (!b.data)
    return runtimeError(b.name);
  return b;
}

llvm::Error JitExecutable::write(const Buffer &b, const reference::Tensor &t) {
  std::vector<char> host(b.bytes);
  writeHostBuffer(t, b.dtype, host.data());
  runtime->write(context, b.data, host.data(), b.bytes);
  return runtimeError(b.name);
}

reference::Tensor JitExecutable::read(const Buffer &b) const {
  std::vector<char> host(b.bytes);
  runtime->read(context, host.data(), b.data, b.bytes);
  return readHostBuffer(b.shape, b.dtype, host.data());
}

llvm::Expected<std::unique_ptr<JitExecutable>>
JitExecutable::compile(ModuleOp module, const JitOptions &options) {
  const RuntimeLibrary &runtime =
      options.runtime ? *options.runtime : RuntimeLibrary::cpu();
  llvm::Expected<func::FuncOp> step = findStepFunction(module);
  if (!step)
    return step.takeError();
  auto lowered = lowerClone(module, options.trace, runtime.target);
  if (failed(lowered))
    return error("cannot lower the program to " + runtime.description);
  Layout layout = takeLayout(**lowered);

  std::unique_ptr<JitExecutable> exe(new JitExecutable);
  exe->runtime = &runtime;
  exe->sites = layout.sites;
  exe->siteRoles = layout.siteRoles;
  exe->arenaSize = layout.arenaBytes;
  auto engine = createEngine(**lowered, options.optLevel, runtime);
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
      *reinterpret_cast<const int64_t *>(*version) != runtime.abi_version()) {
    if (!version)
      llvm::consumeError(version.takeError());
    return error("the lowered module was built for another runtime ABI "
                 "than " +
                 runtime.description + "'s (" +
                 std::to_string(runtime.abi_version()) + ")");
  }
  StrataRtOptions rtOptions;
  runtime.default_options(&rtOptions);
  rtOptions.seed = options.seed;
  rtOptions.rank = options.rank;
  rtOptions.shard = options.rank % layout.shards;
  rtOptions.threads = options.threads;
  rtOptions.device = options.device;
  rtOptions.tf32 = options.tf32;
  rtOptions.gemmAutotune = options.gemmAutotune;
  char message[256] = {0};
  exe->context = runtime.create(&rtOptions, message, sizeof(message));
  if (!exe->context)
    return error("cannot create " + runtime.description + ": " + message);
  runtime.enable_trace(exe->context, options.trace);
  const RuntimeCallbacks &comm = options.communication;
  if (comm.collective)
    runtime.set_collectives(exe->context, comm.collective, comm.wait,
                            comm.collectiveUser);
  if (comm.send && comm.recv)
    runtime.set_point_to_point(exe->context, comm.send, comm.recv,
                               comm.pointToPointUser);

  exe->arena = runtime.alloc(exe->context, layout.arenaBytes);
  if (!exe->arena)
    return exe->runtimeError("the arena");
  for (const std::string &name : layout.persistent) {
    Operation *symbol = module.lookupSymbol(name);
    Type type = isa<ParamOp>(symbol) ? cast<ParamOp>(symbol).getType()
                                     : cast<StateOp>(symbol).getType();
    auto b = exe->makeBuffer(name, type);
    if (!b)
      return b.takeError();
    exe->persistent.push_back(std::move(*b));
  }
  for (BlockArgument arg : step->getArguments()) {
    auto b = exe->makeBuffer("argument " + std::to_string(arg.getArgNumber()),
                             arg.getType());
    if (!b)
      return b.takeError();
    exe->inputs.push_back(std::move(*b));
  }
  for (auto [i, type] : llvm::enumerate(step->getResultTypes())) {
    auto b = exe->makeBuffer("result " + std::to_string(i), type);
    if (!b)
      return b.takeError();
    exe->outputs.push_back(std::move(*b));
  }
  return exe;
}

llvm::Error JitExecutable::emitObject(ModuleOp module, llvm::StringRef path,
                                      llvm::StringRef target, bool trace) {
  auto lowered = lowerClone(module, trace, target);
  if (failed(lowered))
    return error("cannot lower the program to the " + target + " runtime");
  takeLayout(**lowered);
  // Code for this machine's CPU (as the JIT compiles), position-independent
  // with the small code model: the object links into executables (PIE) and
  // shared libraries alike; its calls into the runtime are resolved then.
  initNativeTarget();
  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule =
      mlir::translateModuleToLLVMIR(**lowered, llvmContext);
  if (!llvmModule)
    return error("cannot translate the lowered program to LLVM IR");
  // (The host's triple, CPU and features, as ORC's JIT builds them.)
  auto machine = stepTargetMachine(/*positionIndependent=*/true);
  if (!machine)
    return machine.takeError();
  ExecutionEngine::setupTargetTripleAndDataLayout(llvmModule.get(),
                                                  machine->get());
  if (llvm::Error err =
          makeOptimizingTransformer(2, 0, machine->get())(llvmModule.get()))
    return err;
  llvm::SmallVector<char, 0> object;
  llvm::raw_svector_ostream os(object);
  llvm::legacy::PassManager codegen;
  if ((*machine)->addPassesToEmitFile(codegen, os, nullptr,
                                      llvm::CodeGenFileType::ObjectFile))
    return error("the " + (*machine)->getTargetTriple().str() +
                 " code generator cannot write object files");
  codegen.run(*llvmModule);
  // Whole or not at all: a file of that name from before stays on error.
  return replaceFile(path, [&](llvm::raw_ostream &out) {
    out.write(object.data(), object.size());
  });
}

llvm::Error
JitExecutable::setState(const llvm::StringMap<reference::Tensor> &state,
                        const reference::InitialValues *rest) {
  // A new state: an earlier step's error (the one that may have left the
  // state half updated) is not this call's.
  runtime->clear_error(context);
  // (Checked first: nothing changes on these errors.)
  for (Buffer &b : persistent) {
    auto it = state.find(b.name);
    if (it == state.end() && rest && !rest->contains(b.name))
      return error("no initial value for '" + b.name + "'");
    if (it != state.end() ? it->second.shape != b.shape
                          : rest && rest->shape(b.name) != b.shape)
      return error("'" + b.name + "' has the wrong shape");
  }
  // An initial value is drawn into one host buffer of the tensor's element
  // type, in chunks on several threads, then copied in: no tensor of
  // doubles.
  std::vector<char> host;
  for (Buffer &b : persistent) {
    auto it = state.find(b.name);
    if (it != state.end()) {
      if (llvm::Error err = write(b, it->second))
        return err;
      continue;
    }
    if (!rest)
      continue;
    if (host.size() < size_t(b.bytes))
      host.resize(b.bytes);
    const int64_t elementBytes = strata_rt_element_bytes(b.dtype);
    rest->generate(b.name, [&](int64_t begin, const double *v, int64_t n) {
      writeHostValues(v, n, b.dtype, host.data() + begin * elementBytes);
    });
    runtime->write(context, b.data, host.data(), b.bytes);
    if (llvm::Error err = runtimeError(b.name))
      return err;
  }
  return llvm::Error::success();
}

void JitExecutable::getState(llvm::StringMap<reference::Tensor> &state) const {
  for (const Buffer &b : persistent)
    state[b.name] = read(b);
}

std::optional<reference::Tensor>
JitExecutable::readState(llvm::StringRef name) const {
  for (const Buffer &b : persistent)
    if (b.name == name)
      return read(b);
  return std::nullopt;
}

const char *JitExecutable::activeHostCall() const {
  int64_t site = runtime->active_site(context);
  return site >= 0 && site < int64_t(sites.size()) ? sites[site].c_str()
                                                   : nullptr;
}

std::vector<TraceEvent> JitExecutable::takeTrace() {
  size_t count = 0;
  const StrataRtTraceEvent *events = runtime->take_trace(context, &count);
  std::vector<TraceEvent> result;
  result.reserve(count);
  // Every op runs once a step: a site's second event is its wait.
  llvm::DenseSet<int64_t> seen;
  for (size_t i = 0; i < count; ++i) {
    int64_t site = events[i].site;
    bool known = site >= 0 && site < int64_t(sites.size());
    result.push_back({known ? sites[site] : "<unknown op>",
                      known ? siteRoles[site] : "", events[i].begin,
                      events[i].end, !seen.insert(site).second});
  }
  return result;
}

double JitExecutable::nowUs() const { return runtime->now_us(context); }

int64_t JitExecutable::scratchBytes() const {
  return runtime->scratch_bytes(context);
}

std::string JitExecutable::kernelIsa() const { return runtime->isa(); }

Executable::GemmAutotuned JitExecutable::gemmAutotuned() const {
  GemmAutotuned counts;
  runtime->gemm_autotuned(context, &counts.timed, &counts.onSgemm,
                          &counts.onPacked);
  return counts;
}

llvm::Expected<std::vector<reference::Tensor>>
JitExecutable::step(llvm::ArrayRef<reference::Tensor> args) {
  if (args.size() != inputs.size())
    return error("expected " + llvm::Twine(inputs.size()) + " arguments, got " +
                 llvm::Twine(args.size()));
  runtime->clear_error(context);
  std::vector<void *> in, out, resident;
  for (auto [b, t] : llvm::zip(inputs, args)) {
    if (t.shape != b.shape)
      return error(b.name + " has the wrong shape");
    if (llvm::Error err = write(b, t))
      return std::move(err);
    in.push_back(b.data);
  }
  for (Buffer &b : outputs)
    out.push_back(b.data);
  for (Buffer &b : persistent)
    resident.push_back(b.data);
  function(context, arena, resident.data(), in.data(), out.data());
  if (llvm::Error err = runtimeError("<unknown op>"))
    return std::move(err);
  std::vector<reference::Tensor> results;
  for (const Buffer &b : outputs)
    results.push_back(read(b));
  return results;
}
