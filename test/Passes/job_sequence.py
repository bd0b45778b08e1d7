"""Checks that a pipeline stage's program runs its jobs in the order of its
schedule: reads one rank's program (strata-opt output) on stdin, derives the
sequence of jobs from the ops' micro-batch and role (F<m> for forward ops, B<m>
for backward ops; sends and receives do not count) and compares it with the
stage's entry of the module's strata.schedule, where I<m> and W<m> (ZBH1's
two halves of a backward) both read as B<m>. Prints the sequence.

usage: job_sequence.py STAGE < rank.mlir
"""
import re
import sys


def main():
    stage = int(sys.argv[1])
    text = sys.stdin.read()
    schedule = re.search(r'strata\.schedule = \[([^\]]*)\]', text)
    if not schedule:
        sys.exit('no strata.schedule attribute')
    entries = re.findall(r'"([^"]*)"', schedule.group(1))
    expected = []
    for job in entries[stage].split():
        job = re.sub(r'^[IW]', 'B', job)
        if not expected or expected[-1] != job:
            expected.append(job)
    derived = []
    for line in text.splitlines():
        if 'strata.send' in line or 'strata.recv' in line:
            continue
        mb = re.search(r'strata\.micro_batch = (\d+)', line)
        role = re.search(r'strata\.role = #strata\.role<(\w+)>', line)
        if not mb or not role or role.group(1) not in ('forward', 'backward'):
            continue
        chunk = re.search(r'strata\.stage = (\d+)', line)
        job = ('F' if role.group(1) == 'forward' else 'B') + mb.group(1)
        if '.' in entries[stage] and chunk:
            pp = len(entries)
            job += '.%d' % (int(chunk.group(1)) // pp)
        if not derived or derived[-1] != job:
            derived.append(job)
    print(' '.join(derived))
    if derived != expected:
        sys.exit('stage %d runs\n  %s\nbut its schedule is\n  %s' %
                 (stage, ' '.join(derived), ' '.join(expected)))


if __name__ == '__main__':
    main()
