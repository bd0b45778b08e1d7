//===- Tool.cpp - What every Strata command-line tool shares -------------===//

#include "strata/Tool/Tool.h"

#include "strata/Support/Nesting.h"

#include "mlir/Bytecode/BytecodeReader.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBufferRef.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/PrettyStackTrace.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mpi.h>
#include <new>
#include <oneapi/dnnl/dnnl_version.h>
#include <system_error>
#include <unistd.h>

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
/// "TOOL: error: " and, in a job of several ranks, "rank R: ": written by
/// the handlers below, which must not allocate.
char failurePrefix[160] = "strata: error: ";

void writeRaw(const char *text) {
  size_t left = std::strlen(text);
  while (left > 0) {
    ssize_t written = ::write(STDERR_FILENO, text, left);
    if (written <= 0)
      return;
    text += written;
    left -= size_t(written);
  }
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

/// A thread the process could not start: the machine's limit.
[[noreturn]] void cannotStartThread(const char *reason) {
  outs().flush();
  writeRaw(failurePrefix);
  writeRaw("cannot start a thread (");
  writeRaw(reason);
  writeRaw("): the process is out of memory or at a limit on threads or "
           "processes (ulimit -u, ulimit -v, a container's)\n");
  std::_Exit(1);
}

/// A failed allocation (LLVM's, or operator new's through the handler
/// InitLLVM installs): the process is out of memory, which is no crash of
/// the tool's. (While a bytecode program is read, its reader's impossible
/// counts end here too: fatal names the file.)
[[noreturn]] void outOfMemory(void *user, const char *reason, bool diag) {
  if (!bytecodeInput().empty())
    fatal(user, reason, diag);
  outs().flush();
  writeRaw(failurePrefix);
  writeRaw("out of memory (");
  writeRaw(reason);
  writeRaw("): give the process more memory (a limit such as ulimit -v or a "
           "container's, or fewer ranks on the machine) or the job less "
           "work\n");
  std::_Exit(1);
}

/// LLVM's fatal errors: a bytecode program's reader failing on a damaged
/// file (fatal names the file), a thread LLVM's pool could not start;
/// any other is LLVM's own message, after which LLVM aborts with the crash
/// report (an internal error).
void onFatalError(void *user, const char *reason, bool diag) {
  if (!bytecodeInput().empty())
    fatal(user, reason, diag);
  if (StringRef(reason).starts_with("pthread_create failed"))
    cannotStartThread(reason);
  writeRaw("LLVM ERROR: ");
  writeRaw(reason);
  writeRaw("\n");
}

std::terminate_handler previousTerminate;

/// An exception no one caught: a failed allocation, or a thread the
/// process could not start, is the machine's limit and is said so; any
/// other is an internal error (the crash report). (The exception is
/// rethrown in place, which allocates nothing.)
[[noreturn]] void onTerminate() {
  if (std::current_exception()) {
    try {
      throw;
    } catch (const std::bad_alloc &) {
      outOfMemory(nullptr, "std::bad_alloc", false);
    } catch (const std::system_error &e) {
      if (e.code() == std::errc::resource_unavailable_try_again)
        cannotStartThread(e.what());
    } catch (...) {
    }
  }
  previousTerminate();
  std::abort();
}

/// The handlers above, installed once.
void installFailureHandlers() {
  static bool installed = false;
  if (installed)
    return;
  installed = true;
  install_bad_alloc_error_handler(outOfMemory);
  install_fatal_error_handler(onFatalError);
  previousTerminate = std::set_terminate(onTerminate);
}
} // namespace

void strata::handleToolFailures(StringRef tool) {
  toolName() = tool.str();
  std::snprintf(failurePrefix, sizeof(failurePrefix),
                "%.100s: error: ", toolName().c_str());
  setBugReportMsg("PLEASE report this crash to the Strata developers, with "
                  "the command line, the program, the strategy file and the "
                  "stack dump below.\n");
  installFailureHandlers();
}

void strata::setToolRank(int rank) {
  std::snprintf(failurePrefix, sizeof(failurePrefix),
                "%.100s: error: rank %d: ", toolName().c_str(), rank);
}

std::string strata::checkProgramInput(StringRef tool, StringRef contents,
                                      StringRef path) {
  endProgramInput();
  if (mlir::isBytecode(MemoryBufferRef(contents, path))) {
    // (The handlers of handleToolFailures, which name the file while it is
    // read.)
    toolName() = tool.str();
    bytecodeInput() = path.str();
    installFailureHandlers();
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

void strata::endProgramInput() { bytecodeInput().clear(); }

void strata::parseToolCommandLine(
    int argc, char **argv, StringRef overview,
    ArrayRef<const cl::OptionCategory *> categories) {
  handleToolFailures(sys::path::filename(argc > 0 ? argv[0] : "strata"));
  for (cl::SubCommand *sub : cl::getRegisteredSubcommands())
    cl::HideUnrelatedOptions(categories, *sub);
  cl::SetVersionPrinter([](raw_ostream &os) { os << versionText(); });
  cl::ParseCommandLineOptions(argc, argv, overview);
}
