//===- Tool.cpp - What every Strata command-line tool shares -------------===//

#include "strata/Tool/Tool.h"

#include "strata/Support/Nesting.h"

#include "mlir/Bytecode/BytecodeReader.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBufferRef.h"
#include "llvm/Support/PrettyStackTrace.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <mpi.h>
#include <oneapi/dnnl/dnnl_version.h>

using namespace llvm;

std::string strata::versionText() {
  std::string text;
  raw_string_ostream os(text);
  os << "strata " << STRATA_VERSION << "\n";
  os << "  built with MLIR/LLVM " << LLVM_VERSION_STRING << ", oneDNN "
     << formatv("{0}.{1}.{2}", DNNL_VERSION_MAJOR, DNNL_VERSION_MINOR,
                DNNL_VERSION_PATCH);
#if defined(OMPI_MAJOR_VERSION)
  os << ", Open MPI "
     << formatv("{0}.{1}.{2}", OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION,
                OMPI_RELEASE_VERSION);
#else
  os << ", MPI " << MPI_VERSION << "." << MPI_SUBVERSION;
#endif
  os << "\n";
  return text;
}

namespace {
/// The tool and the bytecode program it reads (checkProgramInput).
std::string &toolName() {
  static std::string name;
  return name;
}
std::string &bytecodeInput() {
  static std::string path;
  return path;
}

[[noreturn]] void fatal(void *, const char *reason, bool) {
  // Write and leave, without the destructors of a state that just failed
  // (errs() is unbuffered; what stdout holds is flushed first).
  outs().flush();
  errs() << toolName() << ": error: " << reason << " (the program '"
         << bytecodeInput()
         << "' is MLIR bytecode, whose reader fails this way on a damaged "
            "file; the program's text form gives located errors)\n";
  std::_Exit(1);
}
} // namespace

std::string strata::checkProgramInput(StringRef tool, StringRef contents,
                                      StringRef path) {
  endProgramInput();
  if (mlir::isBytecode(MemoryBufferRef(contents, path))) {
    toolName() = tool.str();
    bytecodeInput() = path.str();
    install_fatal_error_handler(fatal);
    install_bad_alloc_error_handler(fatal);
  }
  return programNestingError(contents, path);
}

std::unique_ptr<llvm::MemoryBuffer>
strata::openProgramInput(StringRef tool, StringRef path, std::string &error) {
  std::unique_ptr<llvm::MemoryBuffer> input = mlir::openInputFile(path, &error);
  if (!input)
    return nullptr;
  error = checkProgramInput(tool, input->getBuffer(), path);
  if (!error.empty())
    return nullptr;
  return input;
}

void strata::endProgramInput() {
  if (bytecodeInput().empty())
    return;
  bytecodeInput().clear();
  remove_fatal_error_handler();
  remove_bad_alloc_error_handler();
}

void strata::reportCrashesToStrata() {
  setBugReportMsg("PLEASE report this crash to the Strata developers, with "
                  "the command line, the program, the strategy file and the "
                  "stack dump below.\n");
}

void strata::parseToolCommandLine(
    int argc, char **argv, StringRef overview,
    ArrayRef<const cl::OptionCategory *> categories) {
  reportCrashesToStrata();
  for (cl::SubCommand *sub : cl::getRegisteredSubcommands())
    cl::HideUnrelatedOptions(categories, *sub);
  cl::SetVersionPrinter([](raw_ostream &os) { os << versionText(); });
  cl::ParseCommandLineOptions(argc, argv, overview);
}
