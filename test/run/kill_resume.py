#!/usr/bin/env python3
"""Kills a training job (every process, SIGKILL) once it has written a
checkpoint, resumes it with the same command plus --resume, and checks that
the losses after the resume point equal those of an uninterrupted run with
the same arguments; prints what it saw.

A file like the one a writer killed mid-save leaves (`step-....tmp-...`) is
planted in the checkpoint directory: it must be neither loaded nor left.

Usage: kill_resume.py STRATA_RUN PROGRAM CKPT_DIR [STRATA_RUN_ARGS...]"""
import os
import re
import signal
import subprocess
import sys
import time

strata_run, program, ckpt = sys.argv[1:4]
extra = sys.argv[4:]
common = [strata_run, program] + extra


def checkpoints():
    try:
        names = os.listdir(ckpt)
    except FileNotFoundError:
        return []
    return sorted(int(m.group(1)) for m in
                  (re.fullmatch(r"step-(\d+)\.safetensors", n) for n in names)
                  if m)


job = subprocess.Popen(common + ["--steps", "1000000", "--save-every", "5",
                                 "--checkpoint-dir", ckpt, "--keep-checkpoints",
                                 "0"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       start_new_session=True)
deadline = time.time() + 120
while len(checkpoints()) < 2 and time.time() < deadline and job.poll() is None:
    time.sleep(0.01)
# Every process of the job: the launcher, mpirun and the ranks (which mpirun
# puts in process groups of their own, in the job's session).
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            if os.getsid(int(pid)) == job.pid:
                os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass
_, stderr = job.communicate()
if len(checkpoints()) < 2:
    sys.exit("FAIL: no checkpoint within 120 s\n" + stderr.decode())
time.sleep(0.5)
killed_at = checkpoints()[-1]
time.sleep(0.5)
if checkpoints()[-1] != killed_at:
    sys.exit("FAIL: a process of the job survived the kill")
print("killed after a checkpoint")

stale = os.path.join(ckpt, "step-99999999.safetensors.tmp-abc123")
with open(stale, "wb") as f:
    f.write(b"\x10\x00\x00\x00\x00\x00\x00\x00{\"cut short")
resume_at = checkpoints()[-1]
total = resume_at + 6
resumed = subprocess.run(common + ["--steps", str(total), "--resume", ckpt,
                                   "--save-every", "5", "--checkpoint-dir",
                                   ckpt],
                         capture_output=True, text=True)
if resumed.returncode != 0:
    sys.exit("FAIL: the resumed run failed\n" + resumed.stderr)
print("resumed from the newest checkpoint:",
      ("resuming from %s after step %d" % (os.path.join(
          ckpt, "step-%08d.safetensors" % resume_at), resume_at))
      in resumed.stderr)
print("temp file left:", os.path.exists(stale))
full = subprocess.run(common + ["--steps", str(total)], capture_output=True,
                      text=True, check=True)
expected = [l for l in full.stdout.splitlines()
            if int(l.split()[1]) >= resume_at]
got = resumed.stdout.splitlines()
print("steps after the resume point: %d, equal to the uninterrupted run: %s"
      % (len(got), got == expected))
sys.exit(0 if got == expected and len(got) == 6 else 1)
