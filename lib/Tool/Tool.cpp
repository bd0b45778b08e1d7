//===- Tool.cpp - What every Strata command-line tool shares -------------===//

#include "strata/Tool/Tool.h"

#include "llvm/Config/llvm-config.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

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

void strata::parseToolCommandLine(
    int argc, char **argv, StringRef overview,
    ArrayRef<const cl::OptionCategory *> categories) {
  for (cl::SubCommand *sub : cl::getRegisteredSubcommands())
    cl::HideUnrelatedOptions(categories, *sub);
  cl::SetVersionPrinter([](raw_ostream &os) { os << versionText(); });
  cl::ParseCommandLineOptions(argc, argv, overview);
}
