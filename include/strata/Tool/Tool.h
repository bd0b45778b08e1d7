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
#include "llvm/Support/MemoryBuffer.h"

#include <string>

namespace strata {

/// "strata 0.6.0" and, one per line, the MLIR/LLVM, oneDNN and MPI versions
/// Strata was built with.
std::string versionText();

/// Checks the program file `path` (holding `contents`) that `tool` is about
/// to parse: returns why MLIR's parser must not be given it
/// (programNestingError), or "". When the file is MLIR bytecode, whose
/// reader ends the process on some damaged files (report_fatal_error or a
/// failed allocation, on an impossible count), LLVM's fatal errors print
/// "TOOL: error: REASON (the program ... is MLIR bytecode ...)" and exit
/// with status 1 instead of aborting with a crash report, until
/// endProgramInput.
std::string checkProgramInput(llvm::StringRef tool, llvm::StringRef contents,
                              llvm::StringRef path);

/// The program at `path` ("-": standard input) read and checked by
/// checkProgramInput; null, with `error` saying why, when it cannot be read
/// or is refused.
std::unique_ptr<llvm::MemoryBuffer> openProgramInput(llvm::StringRef tool,
                                                     llvm::StringRef path,
                                                     std::string &error);

/// The program is parsed: LLVM's fatal errors abort with a crash report
/// again (they are internal errors from here on).
void endProgramInput();

/// How `tool` ends on failures that are not its bugs: out of memory (a
/// failed allocation, a thread that cannot start) prints "TOOL: error: out
/// of memory (...)" and exits with status 1 instead of a crash report; a
/// crash's stack dump asks for a report to Strata's developers (LLVM's
/// default message names LLVM's issue tracker). parseToolCommandLine calls
/// it.
void handleToolFailures(llvm::StringRef tool);

/// In a job of several ranks: those messages name `rank`.
void setToolRank(int rank);

/// Parses a tool's command line. Only the options in `categories` are shown
/// by --help and offered as suggestions; --version prints versionText().
void parseToolCommandLine(
    int argc, char **argv, llvm::StringRef overview,
    llvm::ArrayRef<const llvm::cl::OptionCategory *> categories);

} // namespace strata

#endif // STRATA_TOOL_TOOL_H
