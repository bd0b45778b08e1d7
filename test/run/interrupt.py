"""Interrupts a `strata-run --nproc N` job and reports what it left behind.

    interrupt.py launcher|group|kill|rank COMMAND...

starts COMMAND... (in a session of its own, with a fresh $TMPDIR) and, once
the first loss is printed:
- launcher: sends SIGINT to the launcher alone (as `kill -INT` would);
- group: sends SIGINT to the whole process group (as a terminal's Ctrl-C
  does: the launcher, mpirun and the ranks all get it);
- kill: sends SIGKILL to the launcher, which cannot pass it on, then runs
  COMMAND... once more with --steps 1 (a later launch removes what a killed
  one left);
- rank: sends SIGTERM to one rank alone (`kill PID`, from a process that
  is not one of the rank's ancestors), and
  prints the job's error lines that say who stopped a rank (the PIDs
  replaced by "PID").
Prints the exit status, whether the job ended within 10 s, and how many of
its processes, session directories under $TMPDIR and shared-memory
directories under /dev/shm are left."""

import glob
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

mode, command = sys.argv[1], sys.argv[2:]
tmp = tempfile.mkdtemp(prefix="interrupt-", dir=os.getcwd())
env = dict(os.environ, TMPDIR=tmp)


def job_processes():
    """The PIDs and command lines of the processes started with this test's
    $TMPDIR (the job's: the launcher passes its environment on to mpirun and
    the ranks)."""
    marker = ("TMPDIR=%s\0" % tmp).encode()
    found = []
    for proc in glob.glob("/proc/[0-9]*"):
        try:
            with open(os.path.join(proc, "environ"), "rb") as f:
                if marker not in f.read():
                    continue
            with open(os.path.join(proc, "cmdline"), "rb") as f:
                found.append((int(os.path.basename(proc)),
                              f.read().split(b"\0")))
        except OSError:
            pass
    return found


def processes_left():
    return len(job_processes())


errors = open(os.path.join(tmp, "stderr.txt"), "w+")
job = subprocess.Popen(command, stdout=subprocess.PIPE,
                       stderr=errors if mode == "rank" else subprocess.DEVNULL,
                       env=env, text=True, start_new_session=True)
first = job.stdout.readline()
if not first.startswith("step 0 loss"):
    sys.exit("the job printed %r before its first loss" % first)
# The rest of its output is read (and dropped) until it ends, so that no
# rank waits on a full pipe while the job should be ending.
reader = threading.Thread(target=lambda: job.stdout.read(), daemon=True)
reader.start()
if mode == "launcher":
    job.send_signal(signal.SIGINT)
elif mode == "group":
    os.killpg(job.pid, signal.SIGINT)
elif mode == "kill":
    job.send_signal(signal.SIGKILL)
elif mode == "rank":
    # A rank is strata-run without --nproc (the launcher has it).
    ranks = [pid for pid, argv in job_processes()
             if argv[0].endswith(b"strata-run") and b"--nproc" not in argv]
    if not ranks:
        sys.exit("no rank process found")
    # From a process that is none of the rank's ancestors (this script is
    # one: a signal from it stops the whole job).
    subprocess.run(["kill", "-TERM", str(max(ranks))], check=True)
else:
    sys.exit("unknown mode %r" % mode)
start = time.monotonic()
try:
    code = job.wait(timeout=60)
except subprocess.TimeoutExpired:
    job.kill()
    sys.exit("the job did not end within 60 s of the signal")
# The launcher's children may outlive a killed launcher by a moment.
while processes_left() and time.monotonic() - start < 20:
    time.sleep(0.2)
print("exit status %d" % code)
if mode == "rank":
    errors.seek(0)
    for line in errors.read().splitlines():
        if "stopped by" in line:
            print(re.sub(r"process \d+", "process PID", line))
print("ended within 10 s: %s" % (time.monotonic() - start < 10))
print("processes left: %d" % processes_left())
if mode == "kill":
    steps = command.index("--steps")
    again = command[:steps] + command[steps + 2:]
    subprocess.run(again + ["--steps", "1", "--quiet"], env=env,
                   stdout=subprocess.DEVNULL, check=True)
print("session directories left: %d"
      % len(glob.glob(os.path.join(tmp, "strata-mpi-*"))))
print("shared-memory directories left: %d"
      % len(glob.glob("/dev/shm/strata-mpi-%d-*" % job.pid)))
