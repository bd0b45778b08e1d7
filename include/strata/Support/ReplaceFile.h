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

#include <optional>

namespace strata {

/// The file that writing `path` replaces: `path` itself, or the file a
/// symbolic link names. Errors read "cannot write 'PATH': REASON": a path
/// that is not a regular file, a link to nothing.
inline llvm::Expected<std::string> replacedFile(llvm::StringRef path) {
  auto failure = [&](std::error_code ec, const llvm::Twine &why) {
    return llvm::createStringError(ec, "cannot write '" + path + "': " + why);
  };
  if (!llvm::sys::fs::exists(path)) {
    if (llvm::sys::fs::is_symlink_file(path))
      return failure(std::make_error_code(std::errc::no_such_file_or_directory),
                     "a symbolic link to a missing file");
    return path.str();
  }
  if (!llvm::sys::fs::is_regular_file(path))
    return failure(std::make_error_code(std::errc::invalid_argument),
                   "not a regular file (the file is written beside it and "
                   "renamed over it)");
  llvm::SmallString<256> target;
  if (std::error_code ec = llvm::sys::fs::real_path(path, target))
    return failure(ec, ec.message());
  return std::string(target);
}

/// replaceFile's temporary file beside FILE is FILE + kReplaceTempSuffix
/// with its `%` replaced by random characters.
inline constexpr llvm::StringLiteral kReplaceTempSuffix = ".tmp-%%%%%%";

/// The name of the file whose replaceFile temporary file is named `name`
/// (what a writer killed mid-write leaves beside it), or nothing when
/// `name` is not such a file.
inline std::optional<llvm::StringRef> replacedByTemp(llvm::StringRef name) {
  const size_t n = kReplaceTempSuffix.size();
  if (name.size() <= n)
    return std::nullopt;
  llvm::StringRef tail = name.take_back(n);
  for (size_t i = 0; i < n; ++i)
    if (kReplaceTempSuffix[i] != '%' && tail[i] != kReplaceTempSuffix[i])
      return std::nullopt;
  return name.drop_back(n);
}

/// Writes `path` with `write`, whole or not at all (see above): into a
/// temporary file beside the replaced file (replacedByTemp), renamed over
/// it.
inline llvm::Error
replaceFile(llvm::StringRef path,
            llvm::function_ref<void(llvm::raw_ostream &)> write) {
  llvm::Expected<std::string> target = replacedFile(path);
  if (!target)
    return target.takeError();
  auto failure = [&](std::error_code ec) {
    return llvm::createStringError(ec, "cannot write '" + path +
                                           "': " + ec.message());
  };
  llvm::SmallString<256> temp;
  int fd;
  if (std::error_code ec = llvm::sys::fs::createUniqueFile(
          *target + kReplaceTempSuffix, fd, temp))
    return failure(ec);
  {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    write(os);
    os.close();
    if (os.has_error()) {
      std::error_code ec = os.error();
      os.clear_error();
      llvm::sys::fs::remove(temp);
      return failure(ec);
    }
  }
  if (std::error_code ec = llvm::sys::fs::rename(temp, *target)) {
    llvm::sys::fs::remove(temp);
    return failure(ec);
  }
  return llvm::Error::success();
}

} // namespace strata

#endif // STRATA_SUPPORT_REPLACEFILE_H
