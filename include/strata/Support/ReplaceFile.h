//===- ReplaceFile.h - Write a file whole or not at all ---------*- C++ -*-===//
//
// Checkpoints and strategy files are written to a temporary file beside
// their path and renamed over it, so that a reader never sees half a file
// and a failed write leaves the old one. The rename replaces whatever the
// path names, so the path is resolved first: a symbolic link's target is
// replaced (not the link), and a path that exists but is not a regular file
// (a device such as /dev/null, a FIFO, a directory) is refused.
//
//===----------------------------------------------------------------------===//

#ifndef STRATA_SUPPORT_REPLACEFILE_H
#define STRATA_SUPPORT_REPLACEFILE_H

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

namespace strata {

/// Writes `path` with `write`, whole or not at all (see above). Errors read
/// "cannot write 'PATH': REASON".
inline llvm::Error
replaceFile(llvm::StringRef path,
            llvm::function_ref<void(llvm::raw_ostream &)> write) {
  auto failure = [&](std::error_code ec, const llvm::Twine &why) {
    return llvm::createStringError(ec, "cannot write '" + path + "': " + why);
  };
  llvm::SmallString<256> target(path);
  if (llvm::sys::fs::exists(path)) {
    if (!llvm::sys::fs::is_regular_file(path))
      return failure(std::make_error_code(std::errc::invalid_argument),
                     "not a regular file (the file is written beside it and "
                     "renamed over it)");
    if (std::error_code ec = llvm::sys::fs::real_path(path, target))
      return failure(ec, ec.message());
  }
  llvm::SmallString<256> temp;
  int fd;
  if (std::error_code ec =
          llvm::sys::fs::createUniqueFile(target + ".tmp-%%%%%%", fd, temp))
    return failure(ec, ec.message());
  {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    write(os);
    os.close();
    if (os.has_error()) {
      std::error_code ec = os.error();
      os.clear_error();
      llvm::sys::fs::remove(temp);
      return failure(ec, ec.message());
    }
  }
  if (std::error_code ec = llvm::sys::fs::rename(temp, target)) {
    llvm::sys::fs::remove(temp);
    return failure(ec, ec.message());
  }
  return llvm::Error::success();
}

} // namespace strata

#endif // STRATA_SUPPORT_REPLACEFILE_H
