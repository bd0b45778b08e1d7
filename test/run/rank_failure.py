#!/usr/bin/env python3
"""Kills one rank of a running `strata-run --nproc 2` and checks that the
whole job ends, with a non-zero status, within a bounded time, and prints
the lines of its stderr that name the failed rank."""
import os
import signal
import subprocess
import sys
import time

strata_run, program = sys.argv[1], sys.argv[2]
job = subprocess.Popen([strata_run, program, "--nproc", "2", "--steps",
                        "1000000", "--quiet"], stdout=subprocess.PIPE,
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


deadline = time.time() + 30
while len(ranks()) < 2 and time.time() < deadline and job.poll() is None:
    time.sleep(0.1)
time.sleep(1.0)  # let both ranks enter the training loop
victims = ranks()
if len(victims) < 2:
    os.killpg(job.pid, signal.SIGKILL)
    sys.exit("FAIL: did not find two ranks (found %d)" % len(victims))
os.kill(victims[-1], signal.SIGKILL)
start = time.time()
try:
    job.wait(timeout=30)
except subprocess.TimeoutExpired:
    os.killpg(job.pid, signal.SIGKILL)
    sys.exit("FAIL: the surviving rank hung after its peer died")
print("job ended %.1f s after a rank was killed, status %d"
      % (time.time() - start, job.returncode))
for line in job.stderr.read().decode(errors="replace").splitlines():
    if "rank" in line:
        print(line.strip())
sys.exit(0 if job.returncode != 0 else 1)
