//===- Tool.h - What every Strata command-line tool shares ------*- C++ -*-===//
//
// The command line of strata-run and strata-gen: --help lists the tool's own
// options only (not the hundreds that LLVM's libraries register), a typo is
// matched against them, and --version prints Strata's version with the
// versions of the libraries it was built with.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_TOOL_TOOL_H
#define STRATA_TOOL_TOOL_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"

#include <string>

namespace strata {

/// "strata 0.6.0" and, one per line, the MLIR/LLVM, oneDNN and MPI versions
/// Strata was built with.
std::string versionText();

/// Makes LLVM's fatal errors (report_fatal_error and allocation failures:
/// a library's internal limit, such as MLIR's bytecode reader meeting an
/// impossible count in a damaged file) print "TOOL: error: REASON" and exit
/// with status 1, instead of aborting with a crash report. Call once, first
/// thing in main (after InitLLVM).
void installFatalErrorHandler(llvm::StringRef tool);

/// Checks the program file `path` (holding `contents`) a tool is about to
/// parse: returns why MLIR's
/// parser must not be given it (programNestingError), or "". Notes a
/// bytecode file for installFatalErrorHandler's message (MLIR's bytecode
/// reader fails fatally on some damaged files).
std::string checkProgramInput(llvm::StringRef contents, llvm::StringRef path);

/// Parses a tool's command line. Only the options in `categories` are shown
/// by --help and offered as suggestions; --version prints versionText().
void parseToolCommandLine(
    int argc, char **argv, llvm::StringRef overview,
    llvm::ArrayRef<const llvm::cl::OptionCategory *> categories);

} // namespace strata

#endif // STRATA_TOOL_TOOL_H
