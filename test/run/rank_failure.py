#!/usr/bin/env python3
"""Kills the last rank of a running `strata-run --nproc N` and checks that
the whole job ends, with a non-zero status, within a bounded time, and that
every surviving rank said where it was stopped; prints the lines of its
stderr that name ranks, sorted. With RANK_SIGNAL=SIGSTOP the rank is
stopped instead (it hangs): a survivor ends the job when it has waited
--collective-timeout for it, saying so. With RANK_WHEN=start the rank is
signalled once it has spent 0.5 s of CPU time (compiling a program that
takes longer) instead of once every rank is training.

Usage: rank_failure.py STRATA_RUN PROGRAM [N [STRATA_RUN_ARGS...]]"""
import os
import signal
import subprocess
import sys
import threading
import time

strata_run, program = sys.argv[1], sys.argv[2]
nproc = int(sys.argv[3]) if len(sys.argv) > 3 else 2
extra = sys.argv[4:]
job = subprocess.Popen([strata_run, program, "--nproc", str(nproc), "--steps",
                        "1000000", "--quiet"] + extra, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, start_new_session=True)


def ranks():
    """strata-run processes of this job other than the launcher."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == job.pid:
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().split(b"\0")
            if os.getsid(int(pid)) == job.pid and cmd[0].endswith(b"strata-run"):
                found.append(int(pid))
        except (OSError, IndexError):
            pass
    return found


# The job's output is read all along, so that no rank ever waits on a
# full pipe (the ranks print a loss each step, thousands a second).
output = {"stdout": [], "stderr": []}


def drain(stream, into):
    for line in iter(stream.readline, b""):
        into.append(line)


readers = [threading.Thread(target=drain, args=(job.stdout, output["stdout"])),
           threading.Thread(target=drain, args=(job.stderr, output["stderr"]))]
for reader in readers:
    reader.daemon = True
    reader.start()

deadline = time.time() + 60
while len(ranks()) < nproc and time.time() < deadline and job.poll() is None:
    time.sleep(0.1)
victims = sorted(ranks())


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if os.environ.get("RANK_WHEN") == "start" and victims:
    while job.poll() is None and time.time() < deadline:
        try:
            if cpu_seconds(victims[-1]) >= 0.5:
                break
        except OSError:
            break
        time.sleep(0.02)
else:
    # Every rank trains once the first step's loss is out (its collectives
    # took every rank), however long compiling took on a loaded machine.
    while (not output["stdout"] and job.poll() is None and
           time.time() < deadline):
        time.sleep(0.05)
    if not output["stdout"]:
        os.killpg(job.pid, signal.SIGKILL)
        sys.exit("FAIL: no rank printed a loss within 60 s")
    time.sleep(0.5)
    victims = sorted(ranks())
if len(victims) < nproc:
    os.killpg(job.pid, signal.SIGKILL)
    sys.exit("FAIL: did not find %d ranks (found %d)" % (nproc, len(victims)))
sig = getattr(signal, os.environ.get("RANK_SIGNAL", "SIGKILL"))
os.kill(victims[-1], sig)
start = time.time()
try:
    job.wait(timeout=30)
except subprocess.TimeoutExpired:
    os.killpg(job.pid, signal.SIGKILL)
    sys.exit("FAIL: the surviving rank hung after its peer died")
ended = time.time() - start
# A rank left behind (the stopped one) would hold the pipes open.
try:
    os.killpg(job.pid, signal.SIGKILL)
except ProcessLookupError:
    pass
for reader in readers:
    reader.join(timeout=10)
stderr = b"".join(output["stderr"])
print("job ended %.1f s after a rank was %s, status %d"
      % (ended,
         "stopped" if sig == signal.SIGSTOP else "killed", job.returncode))
lines = sorted(line.strip() for line in
               stderr.decode(errors="replace").splitlines()
               if "rank" in line)
for line in lines:
    print(line)
stopped = [l for l in lines if "stopped by the job" in l or
           "(--collective-timeout)" in l]
if sig == signal.SIGSTOP:  # (the first to time out ends the job)
    if not stopped:
        sys.exit("FAIL: no surviving rank said why it ended the job")
elif len(stopped) != nproc - 1:
    sys.exit("FAIL: %d of %d surviving ranks said where they stopped"
             % (len(stopped), nproc - 1))
sys.exit(0 if job.returncode != 0 else 1)
