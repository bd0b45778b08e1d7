#!/usr/bin/env python3
"""Draws the pipeline schedule of one training step from a strata-run trace.

    strata-run model.mlir --strategy pp.yaml --nproc 2 --trace t.json
    bench/pipeline_timeline.py t.json [--step N] [--width 100]

One row per rank, time flowing to the right on a common scale: each job
(the ops of strata.job F<m>, B<m>, W<m>) is a box labelled with its job,
`~` is time spent in sends and receives (waiting for a neighbour: the
bubble), `=` the optimizer, blank is time outside any op. Below, the share
of the step each rank spends waiting in receives.
"""
import argparse
import json
import re
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('trace')
    parser.add_argument('--step', type=int, default=None,
                        help='step to draw (default: the last traced one)')
    parser.add_argument('--width', type=int, default=100)
    args = parser.parse_args()

    events = json.load(open(args.trace))['traceEvents']
    steps = [e for e in events if e.get('cat') == 'step']
    if not steps:
        sys.exit('no step events in %s (run strata-run with --trace)' %
                 args.trace)
    step = args.step
    if step is None:
        step = max(int(e['name'].split()[1]) for e in steps)
    ranks = sorted({e['pid'] for e in steps})
    windows = {}
    for e in steps:
        if int(e['name'].split()[1]) == step:
            windows[e['pid']] = (e['ts'], e['ts'] + e['dur'])
    if len(windows) != len(ranks):
        sys.exit('step %d is not in the trace of every rank' % step)
    # Ranks have their own clocks: align each rank's step to start at 0 and
    # draw on the longest step's scale.
    length = max(end - begin for begin, end in windows.values())
    scale = args.width / length

    print('step %d: %.1f ms; one column = %.2f ms' %
          (step, length / 1000.0, length / 1000.0 / args.width))
    for rank in ranks:
        begin, end = windows[rank]
        row = [' '] * args.width
        segments = []  # (first column, last column, label)
        waiting = 0.0
        for e in events:
            if e.get('pid') != rank or e.get('ph') != 'X' or \
                    e.get('cat') == 'step':
                continue
            if e['ts'] < begin or e['ts'] >= end:
                continue
            a = int((e['ts'] - begin) * scale)
            b = max(a, min(args.width - 1,
                           int((e['ts'] + e['dur'] - begin) * scale)))
            name = e['name']
            job = re.search(r'\[(\w+(?:\.\d+)?)\]', name)
            if 'strata.recv' in name or 'strata.send' in name:
                if 'strata.recv' in name:
                    waiting += e['dur']
                for c in range(a, b + 1):
                    if row[c] == ' ':
                        row[c] = '~'
            elif job:
                label = job.group(1)
                if segments and segments[-1][2] == label and \
                        segments[-1][1] >= a - 1:
                    segments[-1][1] = b
                else:
                    segments.append([a, b, label])
            elif e.get('cat') == 'optimizer':
                for c in range(a, b + 1):
                    row[c] = '='
        for a, b, label in segments:
            for c in range(a, b + 1):
                row[c] = '-'
            row[a] = '|'
            text = label if b - a >= len(label) else label[0]
            for i, ch in enumerate(text[:max(b - a, 1)]):
                if a + 1 + i <= b:
                    row[a + 1 + i] = ch
        print('rank %d |%s|' % (rank, ''.join(row)))
    for rank in ranks:
        begin, end = windows[rank]
        wait = sum(e['dur'] for e in events
                   if e.get('pid') == rank and 'strata.recv' in e['name']
                   and begin <= e['ts'] < end)
        print('rank %d waits in receives %.1f%% of the step' %
              (rank, 100.0 * wait / (end - begin)))


if __name__ == '__main__':
    main()
