"""Interrupts a `strata-run --nproc N` job: starts COMMAND..., sends SIGINT
to the launcher (as `kill -INT` would; a terminal's Ctrl-C reaches mpirun
and the ranks too) once the first loss is printed, and prints the exit
status, how long the job took to end after it, and how many of the
session directories it made under $TMPDIR are left."""

import glob
import os
import signal
import subprocess
import sys
import tempfile
import time

tmp = tempfile.mkdtemp(prefix="interrupt-", dir=os.getcwd())
env = dict(os.environ, TMPDIR=tmp)
job = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, env=env, text=True)
first = job.stdout.readline()
if not first.startswith("step 0 loss"):
    sys.exit("the job printed %r before its first loss" % first)
job.send_signal(signal.SIGINT)
start = time.monotonic()
try:
    code = job.wait(timeout=60)
except subprocess.TimeoutExpired:
    job.kill()
    sys.exit("the job did not end within 60 s of SIGINT")
print("exit status %d" % code)
print("ended within 10 s: %s" % (time.monotonic() - start < 10))
time.sleep(1)  # (ranks that outlive mpirun by a moment)
print("session directories left: %d"
      % len(glob.glob(os.path.join(tmp, "strata-mpi-*"))))
