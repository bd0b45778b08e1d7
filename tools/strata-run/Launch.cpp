//===- Launch.cpp - Launch the ranks of a job, and stop them cleanly ------===//
//
// `strata-run --nproc N` runs itself under mpirun; each rank of the job
// installs handlers that name, when the job stops it, what it was waiting
// for.
//
//===----------------------------------------------------------------------===//

#include "Launch.h"

#include "strata/Execution/MpiCommunicator.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ftw.h>
#include <iterator>
#include <string>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace llvm;

static int launchError(const Twine &message) {
  WithColor::error(errs(), "strata-run") << message << "\n";
  return 1;
}

namespace {
/// What a rank says when its job stops it: mpirun sends SIGTERM to every
/// rank when one of them fails (and a person may press Ctrl-C). A rank in a
/// collective, a send, a receive or a wait names it and exits; a rank that
/// is computing goes on to its next communication (where it would wait for
/// the failed peer forever) and names that one, or, after two seconds
/// without any, says it was computing. Signal handlers use write(2) only.
namespace stop {
char prefix[64] = "strata-run: error: ";
std::atomic<const strata::Executable *> executable{nullptr};
/// Host-side communication in progress (not inside a step), or null.
std::atomic<const char *> hostActivity{nullptr};
/// Long work of the start that communicates with no peer (compiling the
/// program), or null.
std::atomic<const char *> phase{nullptr};
volatile sig_atomic_t requested = 0;
/// The process that sent SIGTERM when it is none of the rank's ancestors
/// (mpirun, a batch system's daemon, the script or shell that started
/// them), or 0: a person or a script stopped this rank alone, which is no
/// peer's failure.
volatile sig_atomic_t sender = 0;
/// The rank is leaving on purpose (strata_run::leaving).
volatile sig_atomic_t leavingOnPurpose = 0;
/// The rank's ancestors, read when the handlers are installed.
pid_t ancestors[32];
int ancestorCount = 0;

/// Fills `ancestors` from /proc: the parent, its parent, ... up to init.
void readAncestors() {
  pid_t pid = getppid();
  while (pid > 0 && ancestorCount < int(std::size(ancestors))) {
    ancestors[ancestorCount++] = pid;
    if (pid == 1)
      return;
    // "PID (COMMAND) STATE PPID ...", COMMAND possibly holding spaces and
    // parentheses: the parent follows the last ')'.
    std::string path = "/proc/" + std::to_string(pid) + "/stat";
    FILE *stat = std::fopen(path.c_str(), "r");
    if (!stat)
      return;
    char text[512];
    size_t read = std::fread(text, 1, sizeof(text) - 1, stat);
    std::fclose(stat);
    text[read] = '\0';
    const char *close = std::strrchr(text, ')');
    char state;
    int parent;
    if (!close || std::sscanf(close + 1, " %c %d", &state, &parent) != 2)
      return;
    pid = parent;
  }
}

bool isAncestor(pid_t pid) {
  for (int i = 0; i < ancestorCount; ++i)
    if (ancestors[i] == pid)
      return true;
  return false;
}

/// A line built in place and written with one write(2), so that the lines
/// of ranks sharing mpirun's stderr do not interleave. Signal-safe.
struct Line {
  char text[1024];
  size_t used = 0;
  Line &operator<<(const char *s) {
    size_t n = std::min(std::strlen(s), sizeof(text) - used);
    std::memcpy(text + used, s, n);
    used += n;
    return *this;
  }
  void write() {
    ssize_t ignored = ::write(STDERR_FILENO, text, used);
    (void)ignored;
  }
};

/// Where this rank is, in its last words: " IN SITE" (an op or host-side
/// communication), " while PHASE" (the start's long work), or `otherwise`.
void describePlace(Line &line, const char *where, const char *in,
                   const char *otherwise) {
  if (where)
    line << " " << in << " " << where;
  else if (const char *now = phase.load())
    line << " while " << now;
  else
    line << otherwise;
}

/// `value` (>= 0) in decimal, into `text` (at least 21 bytes).
/// Signal-safe.
const char *decimal(long value, char *text) {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = char('0' + value % 10);
    value /= 10;
  } while (value > 0 && n < 20);
  for (int i = 0; i < n; ++i)
    text[i] = digits[n - 1 - i];
  text[n] = '\0';
  return text;
}

[[noreturn]] void report(const char *where) {
  Line line;
  char pid[24];
  line << prefix;
  if (sender)
    line << "stopped by SIGTERM from process " << decimal(sender, pid)
         << ", which is not the job's launcher,";
  else
    line << (requested == SIGINT ? "interrupted" : "stopped by the job");
  describePlace(line, where, "while in",
                " while computing (outside any collective)");
  if (sender)
    line << ": the other ranks stop when this one ends\n";
  else
    line << ": a peer rank failed or the job was cancelled; mpirun names the "
            "rank that ended first\n";
  line.write();
  _exit(128 + (requested ? int(requested) : SIGTERM));
}

const char *where() {
  if (const strata::Executable *exe = executable.load())
    if (const char *site = exe->activeHostCall())
      return site;
  return hostActivity.load();
}

/// Called where communication begins: a stopped rank reports it there.
void check() {
  if (requested)
    report(where());
}

void onSignal(int sig, siginfo_t *info, void *) {
  if (leavingOnPurpose)
    _exit(1);
  if (requested) // a second signal: report now
    report(where());
  // (SIGINT is a person's or a script's interruption of the job, sent to
  // every process of it: "interrupted" says it. The sender is set before
  // the request, which another thread's check() may see at once.)
  if (sig == SIGTERM && info && info->si_code == SI_USER && info->si_pid > 0 &&
      !isAncestor(info->si_pid))
    sender = info->si_pid;
  requested = sig;
  // (Work of the start does not reach a communication soon: say so now.)
  if (const char *at = where(); at || phase.load())
    report(at);
  alarm(2);
}

void onAlarm(int) { report(where()); }

/// Installs the handlers of a rank of an MPI job.
void install(int rank) {
  std::snprintf(prefix, sizeof(prefix), "strata-run: error: rank %d: ", rank);
  readAncestors();
  struct sigaction action = {};
  action.sa_sigaction = onSignal;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  action.sa_flags = 0;
  action.sa_handler = onAlarm;
  sigaction(SIGALRM, &action, nullptr);
}

/// Marks host-side communication (outside a step) for the report.
} // namespace stop
} // namespace

namespace strata_run {

void installStopHandlers(int rank) { stop::install(rank); }

void watchCollectives() {
  strata::MpiCommunicator::watchBlockedCalls([](double waited) {
    char text[128];
    std::snprintf(text, sizeof(text), "waited %.0f s for a peer rank", waited);
    stop::Line line;
    line << stop::prefix << text;
    stop::describePlace(line, stop::where(), "in", "");
    line << " (--collective-timeout): a peer rank stopped or hangs; ending "
            "the job\n";
    line.write();
  });
}

void watchExecutable(const strata::Executable *executable) {
  stop::executable.store(executable);
}

void communicationBegins(const char *what) {
  if (what)
    stop::hostActivity.store(what);
  stop::check();
}

void communicationEnds() { stop::hostActivity.store(nullptr); }

void startupPhase(const char *what) { stop::phase.store(what); }

void leaving() { stop::leavingOnPurpose = 1; }

} // namespace strata_run

/// The mpirun child of `launchRanks`, to which the launcher forwards the
/// signals sent to it alone (a terminal's Ctrl-C reaches both already).
static volatile sig_atomic_t launchedPid = 0;
/// The last of SIGINT, SIGTERM, SIGHUP the launcher received (0: none): a
/// job it stopped exits as the signal would have ended it (128 + signal).
static volatile sig_atomic_t stopSignal = 0;

static void forwardSignal(int sig, siginfo_t *info, void *) {
  stopSignal = sig;
  if (launchedPid > 0 && info &&
      (info->si_code == SI_USER || info->si_code == SI_QUEUE))
    kill(pid_t(launchedPid), sig);
}

/// Copies mpirun's stderr from `fd` to ours, line by line, leaving out the
/// banners that follow MPI_Abort and a rank's non-zero exit: a rank that
/// fails has said why, with its rank, already. Other notices of mpirun (which
/// rank died of which signal) pass unchanged.
static void relayStderr(int fd) {
  std::string pending, block;
  bool inBlock = false;
  auto emit = [](StringRef text) {
    errs() << text;
    errs().flush();
  };
  auto line = [&](StringRef text) {
    bool rule = text.starts_with("-----");
    // mpirun's count of the aborts it did not print (each failing rank has
    // said why), and how to see them.
    if (!inBlock && (text.contains("sent help message help-mpi-api.txt / "
                                   "mpi-abort") ||
                     text.contains("\"orte_base_help_aggregate\" to 0")))
      return;
    if (!inBlock) {
      if (rule) {
        inBlock = true;
        block = text.str();
      } else {
        emit(text);
      }
      return;
    }
    block += text.str();
    if (rule) {
      inBlock = false;
      // (A rank that exits non-zero has printed its error: mpirun's notices
      // of it, and of the abort, would repeat that at length.)
      StringRef text = block;
      if (!text.contains("MPI_ABORT was invoked") &&
          !text.contains("returned\na non-zero exit code") &&
          !text.contains("exited with non-zero status"))
        emit(block);
      block.clear();
    }
  };
  char buffer[4096];
  while (true) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    pending.append(buffer, size_t(n));
    size_t end;
    while ((end = pending.find('\n')) != std::string::npos) {
      line(StringRef(pending).take_front(end + 1));
      pending.erase(0, end + 1);
    }
  }
  if (!pending.empty())
    line(pending);
  if (inBlock)
    emit(block);
}

/// Removes the directory tree at `path`, whatever its entries are (mpirun
/// leaves a FIFO in its session directory when it is interrupted, which
/// sys::fs::remove_directories refuses to remove); errors are ignored.
static void removeTree(const char *path) {
  nftw(
      path,
      [](const char *entry, const struct stat *, int, struct FTW *) {
        ::remove(entry);
        return 0;
      },
      16, FTW_DEPTH | FTW_PHYS);
}

/// This machine's name as it appears in the directories a launch makes:
/// letters, digits, '.' and '-' kept, anything else '_'.
static std::string hostTag() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || !name[0])
    return "host";
  std::string tag(name);
  for (char &c : tag)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-')
      c = '_';
  return tag;
}

/// The directories a launch makes are named "strata-mpi-<host>-<launcher
/// pid>-" and a random suffix, so that a later launch on the same machine
/// can tell those of a launcher that no longer runs (killed by SIGKILL
/// before it could remove them) and remove them, and leaves those of other
/// machines (a $TMPDIR shared between nodes) or containers alone.
static std::string launchPrefix(StringRef parent) {
  SmallString<128> prefix(parent);
  sys::path::append(prefix, "strata-mpi-" + hostTag() + "-" + Twine(getpid()));
  return std::string(prefix);
}

/// Removes the directories in `parent` that a launcher on this machine made
/// and left behind when it was killed: the name's host is this one, its
/// pid no longer runs and the directory is ours.
static void removeStaleLaunches(StringRef parent) {
  const std::string host = hostTag();
  std::error_code ec;
  for (sys::fs::directory_iterator it(parent, ec), end; it != end && !ec;
       it.increment(ec)) {
    StringRef name = sys::path::filename(it->path());
    if (!name.consume_front("strata-mpi-"))
      continue;
    // <host>-<pid>-<suffix>; the host may hold '-'.
    auto [hostAndPid, suffix] = name.rsplit('-');
    auto [hostName, pidText] = hostAndPid.rsplit('-');
    pid_t pid = 0;
    if (suffix.empty() || hostName != host || pidText.getAsInteger(10, pid) ||
        pid <= 0)
      continue;
    struct stat info;
    if (lstat(it->path().c_str(), &info) != 0 || !S_ISDIR(info.st_mode) ||
        info.st_uid != geteuid())
      continue;
    if (kill(pid, 0) != 0 && errno == ESRCH)
      removeTree(it->path().c_str());
  }
}

/// `strata-run --nproc N` outside MPI: run the same command under mpirun and
/// wait for it. Every launch gets its own OpenMPI session directory (a fresh
/// directory under $TMPDIR, removed afterwards): two mpiruns started at the
/// same instant otherwise race to create the shared one and one of them
/// fails in orte_init.
int strata_run::launchRanks(int argc, char **argv, int64_t nproc) {
  auto mpirun = sys::findProgramByName("mpirun");
  if (!mpirun)
    return launchError("--nproc " + Twine(nproc) +
                       " needs mpirun (Debian: openmpi-bin) on the PATH");
  std::string self = sys::fs::getMainExecutable(argv[0], (void *)&launchError);
  // (No rank reads stdin: mpirun would forward the caller's to rank 0 and
  // consume it, which a shell loop reading a list would lose.)
  std::vector<std::string> args = {
      *mpirun,           "-np",     std::to_string(nproc),
      "--oversubscribe", "--stdin", "none"};
  if (geteuid() == 0)
    args.push_back("--allow-run-as-root");
  args.push_back(self);
  for (int i = 1; i < argc; ++i) {
    StringRef a(argv[i]);
    if (a == "--nproc" || a == "-nproc") {
      ++i;
      continue;
    }
    if (a.starts_with("--nproc=") || a.starts_with("-nproc="))
      continue;
    args.push_back(a.str());
  }
  // In $TMPDIR, made absolute (mpirun resolves a relative one against
  // another directory); /tmp when it is empty.
  SmallString<128> base, sessionDir;
  sys::path::system_temp_directory(/*ErasedOnReboot=*/true, base);
  if (base.empty())
    base = "/tmp";
  sys::fs::make_absolute(base);
  removeStaleLaunches(base);
  if (std::error_code ec =
          sys::fs::createUniqueDirectory(launchPrefix(base), sessionDir))
    return launchError("cannot create a session directory for mpirun in " +
                       base + ": " + ec.message());
  SmallString<128> shmDir;
  // (However the launch ends from here on.)
  auto removeDirectories = llvm::make_scope_exit([&] {
    removeTree(sessionDir.c_str());
    if (!shmDir.empty())
      removeTree(shmDir.c_str());
  });
  // Shared memory between the local ranks; no network probing.
  setenv("OMPI_MCA_pml", "ob1", /*overwrite=*/0);
  setenv("OMPI_MCA_btl", "self,vader", 0);
  setenv("OMPI_MCA_orte_tmpdir_base", sessionDir.c_str(), 1);
  // The ranks' shared-memory segments (4 MiB each), which OpenMPI puts in
  // /dev/shm and leaves there when a rank does not reach MPI_Finalize (a
  // failed or interrupted job): in a directory of this launch, removed
  // with the session directory.
  if (!std::getenv("OMPI_MCA_btl_vader_backing_directory")) {
    if (sys::fs::is_directory("/dev/shm")) {
      removeStaleLaunches("/dev/shm");
      if (sys::fs::createUniqueDirectory(launchPrefix("/dev/shm"), shmDir))
        shmDir.clear();
    }
    setenv("OMPI_MCA_btl_vader_backing_directory",
           (shmDir.empty() ? sessionDir : shmDir).c_str(), 1);
  }
  std::vector<char *> cargs;
  for (std::string &a : args)
    cargs.push_back(a.data());
  cargs.push_back(nullptr);
  outs().flush();
  errs().flush();

  struct sigaction forward = {}, saved[3];
  forward.sa_sigaction = forwardSignal;
  forward.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&forward.sa_mask);
  const int forwarded[3] = {SIGINT, SIGTERM, SIGHUP};
  for (int i = 0; i < 3; ++i)
    sigaction(forwarded[i], &forward, &saved[i]);
  auto restoreHandlers = llvm::make_scope_exit([&] {
    for (int i = 0; i < 3; ++i)
      sigaction(forwarded[i], &saved[i], nullptr);
  });
  // mpirun's stderr (which carries the ranks') passes through relayStderr.
  int errPipe[2] = {-1, -1};
  if (pipe(errPipe) != 0)
    return launchError("cannot create a pipe for mpirun: " +
                       Twine(std::strerror(errno)));
  pid_t launcher = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    // A launcher that is killed (SIGKILL, which it cannot forward) takes
    // the job with it: mpirun gets SIGTERM and stops the ranks.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != launcher)
      _exit(128 + SIGTERM);
    for (int i = 0; i < 3; ++i)
      sigaction(forwarded[i], &saved[i], nullptr);
    dup2(errPipe[1], STDERR_FILENO);
    close(errPipe[0]);
    close(errPipe[1]);
    execv(mpirun->c_str(), cargs.data());
    std::fprintf(stderr, "strata-run: error: cannot run %s: %s\n",
                 mpirun->c_str(), std::strerror(errno));
    _exit(127);
  }
  int status = 0, code = 1;
  if (pid < 0) {
    code = launchError("cannot start " + *mpirun + ": " + std::strerror(errno));
  } else {
    launchedPid = pid;
    close(errPipe[1]);
    relayStderr(errPipe[0]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    launchedPid = 0;
    code = WIFEXITED(status)     ? WEXITSTATUS(status)
           : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                 : 1;
    if (code != 0 && stopSignal)
      code = 128 + stopSignal;
  }
  close(errPipe[0]);
  if (pid < 0)
    close(errPipe[1]);
  return code;
}
