"""Prints the job list of every stage of a 4-stage, 8-micro-batch pipeline
of PROGRAM under SCHEDULE with V chunks per stage, after checking with
job_sequence.py that each rank's program runs its jobs in that order.

usage: job_schedules.py STRATA_OPT PROGRAM SCHEDULE V
"""
import os
import re
import subprocess
import sys


def main():
    opt, program, schedule = sys.argv[1], sys.argv[2], sys.argv[3]
    chunks = int(sys.argv[4])
    checker = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           'job_sequence.py')
    for rank in range(4):
        ir = subprocess.run(
            [opt, program, '--strata-rank-grid=pp=4',
             '--strata-stage-split=vpp-degree=%d' % chunks,
             '--strata-autodiff', '--strata-gradient-merge=k-steps=8',
             '--strata-optimizer',
             '--strata-pipeline=vpp-degree=%d accumulate-steps=8 '
             'schedule=%s rank=%d' % (chunks, schedule, rank)],
            check=True, capture_output=True, text=True).stdout
        check = subprocess.run([sys.executable, checker, str(rank)], input=ir,
                               capture_output=True, text=True)
        if check.returncode != 0:
            sys.exit(check.stderr)
        if rank == 0:
            entries = re.findall(
                r'"([^"]*)"',
                re.search(r'strata\.schedule = \[([^\]]*)\]', ir).group(1))
            for stage, jobs in enumerate(entries):
                print('stage %d: %s' % (stage, jobs))


if __name__ == '__main__':
    main()
