#!/usr/bin/env python3
"""Pipeline bubble and activation memory per schedule, measured against the
bubble formulas of the schedules ((P-1)/(M+P-1) for FThenB and 1F1B).

    /usr/bin/python3 bench/pipeline_bubble.py --build build [--stages 2]

Trains the benchmark GPT (4 layers x 128, sequence 64, batch 32, dropout
0.1) for a few steps under each schedule and micro-batch count on `--stages`
ranks (one core each: keep stages <= cores) and prints, per schedule and M:
the formula's bubble, the measured one (the share of the step the ranks
spend blocked in receives, mean over ranks and steps after the first), the
step time, and the planned activation peak of stage 0 and of the last stage.
The baseline row is the same model with gradient merge (M micro-batches) on
one rank with one thread.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

SCHEDULES = ['FThenB', '1F1B', 'Eager1F1B', 'ZBH1', 'VPP']


def run(args, workdir, strategy, nproc, name):
    path = os.path.join(workdir, name + '.yaml')
    with open(path, 'w') as f:
        f.write(strategy)
    report = os.path.join(workdir, name + '.json')
    cmd = [os.path.join(args.build, 'bin', 'strata-run'),
           os.path.join(workdir, 'gpt.mlir'), '--strategy', path,
           '--steps', str(args.steps), '--seed', '1', '--report', report,
           '--cpu-threads', '1', '--quiet']
    if nproc > 1:
        cmd += ['--nproc', str(nproc)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return json.load(open(report))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--build', default='build')
    parser.add_argument('--stages', type=int, default=2)
    parser.add_argument('--steps', type=int, default=6)
    parser.add_argument('--micro-batches', default='4,8')
    args = parser.parse_args()
    p = args.stages
    with tempfile.TemporaryDirectory() as workdir:
        with open(os.path.join(workdir, 'gpt.mlir'), 'w') as f:
            subprocess.run(
                [os.path.join(args.build, 'bin', 'strata-gen'), 'gpt',
                 '--layers', '4', '--hidden', '128', '--heads', '4', '--seq',
                 '64', '--vocab', '256', '--batch', '32', '--dropout', '0.1'],
                check=True, stdout=f)
        print('P = %d stages; GPT 4x128, seq 64, batch 32' % p)
        print('%-10s %3s %8s %9s %9s %12s %12s' %
              ('schedule', 'M', 'formula', 'measured', 'step ms',
               'act stage0', 'act last'))
        for m in [int(x) for x in args.micro_batches.split(',')]:
            base = run(args, workdir,
                       'optimizer: {type: adamw}\n'
                       'gradient_merge: {enable: true, k_steps: %d}\n' % m,
                       1, 'base%d' % m)
            times = base['step_time_ms'][1:]
            print('%-10s %3d %8s %9s %9.1f %12d %12s' %
                  ('1 rank', m, '-', '-', sum(times) / len(times),
                   base['activation_peak_bytes'][0], '-'))
            for schedule in SCHEDULES:
                vpp = 2 if schedule == 'VPP' else 1
                if schedule == 'VPP' and m % p:
                    continue
                strategy = ('optimizer: {type: adamw}\n'
                            'pipeline: {enable: true, pp_degree: %d, '
                            'vpp_degree: %d, accumulate_steps: %d, '
                            'schedule_mode: %s}\n' % (p, vpp, m, schedule))
                try:
                    r = run(args, workdir, strategy, p,
                            '%s%d' % (schedule, m))
                except subprocess.CalledProcessError:
                    print('%-10s %3d   (refused: see strata-run)' %
                          (schedule, m))
                    continue
                pipe = r['pipeline']
                measured = pipe['bubble_measured']
                times = r['step_time_ms'][1:]
                act = r['activation_peak_bytes']
                print('%-10s %3d %8.3f %9.3f %9.1f %12d %12d' %
                      (schedule, m, pipe['bubble_formula'],
                       sum(measured) / len(measured),
                       sum(times) / len(times), act[0], act[-1]))


if __name__ == '__main__':
    main()
