#!/usr/bin/env python3
"""Starts JOBS copies of a command at the same instant (forked children
released together through one pipe), ROUNDS times, each under a private
TMPDIR; prints how many launches succeeded, the first failure's output, and
how many entries the launches left in TMPDIR (their MPI session directories
must be removed).

Usage: concurrent_launch.py --jobs N --rounds R COMMAND [ARGS...]"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

parser = argparse.ArgumentParser()
parser.add_argument("--jobs", type=int, default=4)
parser.add_argument("--rounds", type=int, default=5)
parser.add_argument("--timeout", type=float, default=300)
parser.add_argument("command", nargs=argparse.REMAINDER)
args = parser.parse_args()

# A short private TMPDIR (OpenMPI puts sockets under it; their paths are
# limited to 107 bytes).
tmp = tempfile.mkdtemp(prefix="strata-cl-", dir="/tmp")
env = dict(os.environ, TMPDIR=tmp)
total = ok = 0
failure = None
try:
    for round_ in range(args.rounds):
        release_r, release_w = os.pipe()
        jobs = []
        for j in range(args.jobs):
            # Each child blocks on the pipe, then execs the command: all
            # start when the parent closes the write end.
            wrapper = ["/bin/sh", "-c", 'read _ <&3; exec "$@"', "sh"]
            jobs.append(subprocess.Popen(
                wrapper + args.command, env=env, pass_fds=(release_r,),
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                preexec_fn=lambda: os.dup2(release_r, 3)))
        os.close(release_r)
        os.close(release_w)
        for job in jobs:
            try:
                out, _ = job.communicate(timeout=args.timeout)
            except subprocess.TimeoutExpired:
                job.kill()
                out, _ = job.communicate()
                out += b"\n(timed out)"
            total += 1
            if job.returncode == 0:
                ok += 1
            elif failure is None:
                failure = "round %d: exit %d\n%s" % (
                    round_, job.returncode, out.decode(errors="replace"))
    print("%d of %d launches succeeded" % (ok, total))
    if failure:
        print("first failure:", failure)
    left = sorted(os.listdir(tmp))
    print(" ".join(["session directories left: %d" % len(left)] + left))
finally:
    shutil.rmtree(tmp, ignore_errors=True)
sys.exit(0 if ok == total else 1)
