#!/usr/bin/env python3
"""Walks the whole strategy schema (every key that `strata-opt
--print-strategy=json` prints) and checks that no key is silently ignored:
for every key, a strategy that sets it to a non-default value must either be
refused or compile to other programs (on some rank) than the same strategy
without it. Each key is tried on top of bases that make its section active
(the section enabled, each optimizer type and learning-rate schedule), and
once in a strategy where its section is disabled.

Prints one line per key that changed nothing, then a summary.

Usage: every_key.py STRATA_OPT PROGRAM.mlir [KEY=PROGRAM.mlir ...]

A KEY=PROGRAM argument tries that key on another program: one that has
what the key's pass rewrites where the main program has not (an RMS norm
written out, say)."""
import json
import os
import subprocess
import sys
import tempfile

strata_opt, main_program = sys.argv[1], sys.argv[2]
key_programs = dict(arg.split("=", 1) for arg in sys.argv[3:])
work = tempfile.mkdtemp(prefix="every-key-")


def write(strategy):
    path = os.path.join(work, "s%d.json" % write.count)
    write.count += 1
    with open(path, "w") as f:
        json.dump(strategy, f)
    return path


write.count = 0
cache = {}


def compile_all(strategy, world, program):
    """The programs of every rank, or None when the strategy is refused."""
    key = (json.dumps(strategy, sort_keys=True), world, program)
    if key in cache:
        return cache[key]
    path = write(strategy)
    programs = []
    for rank in range(world):
        done = subprocess.run(
            [strata_opt, "--strategy=" + path, "--world-size=%d" % world,
             "--rank=%d" % rank, program], capture_output=True, text=True)
        if done.returncode != 0:
            programs = None
            break
        programs.append(done.stdout)
    cache[key] = programs
    return programs


defaults = json.loads(subprocess.run(
    [strata_opt, "--strategy=" + write({}), "--print-strategy=json"],
    check=True, capture_output=True, text=True).stdout)

# Values to try for keys whose type alone does not give a useful one.
CANDIDATES = {
    "sharding.stage": [2, 3],
    "sharding.degree": [1, 4],
    "sharding.partition_algor": ["use_order"],
    "sharding.segment_size": [1],
    "sharding.comm_buffer_size_MB": [0.0001],
    "pipeline.schedule_mode": ["FThenB", "ZBH1", "VPP"],
    "pipeline.pp_degree": [4],
    "pipeline.micro_batch_size": [3],
    "pipeline.accumulate_steps": [4],
    "recompute.checkpoints": [["h0", "h1"]],
    "recompute.no_recompute_segments": [[0]],
    "recompute.refined_ops_patterns": [
        [{"main_ops": ["matmul"], "num": 1, "pre_ops": [], "suf_ops": []}]],
    "amp.dtype": ["bfloat16"],
    "amp.level": ["o2"],
    "amp.custom_white_list": [["softmax"]],
    "amp.custom_black_list": [["matmul"]],
    "dp_optimization.comm_buffer_size": [0.001],
    "dp_optimization.last_comm_buffer_size": [0.0001],
    "hybrid.dp_degree": [3],
    "optimizer.type": ["sgd", "lamb"],
    "optimizer.exclude_from_weight_decay": [["bias"]],
    "optimizer.lr_schedule": ["cosine", "linear_warmup"],
    "optimizer.warmup_steps": [3],
    "optimizer.decay_steps": [7],
    "optimizer.min_lr": [0.0001],
    "optimizer.momentum": [0.5],
}


def candidates(key, default):
    if key in CANDIDATES:
        return [v for v in CANDIDATES[key] if v != default]
    if isinstance(default, bool):
        return [not default]
    if isinstance(default, int):
        return [default + 1]
    if isinstance(default, float):
        return [default * 0.5 if default else 0.5]
    raise SystemExit("no candidate value for %s (default %r): add one to "
                     "CANDIDATES" % (key, default))


OPTIMIZERS = ["sgd", "momentum", "adam", "adamw", "lamb", "lars"]
SCHEDULES = [{"lr_schedule": "constant"},
             {"lr_schedule": "linear_warmup", "warmup_steps": 2},
             {"lr_schedule": "cosine", "decay_steps": 10}]
# Bases (strategy, world size) in which a section is active.
BASES = {
    "sharding": [({"sharding": {"enable": True, "degree": 2, "stage": s}}, 2)
                 for s in (1, 2, 3)],
    "fused_passes": [({"fused_passes": {"enable": True}}, 1)],
    "gradient_merge": [({"gradient_merge": {"enable": True, "k_steps": 2}}, 1)],
    "pipeline": [({"pipeline": {"enable": True, "pp_degree": 2,
                                "accumulate_steps": 2}}, 2)],
    "recompute": [({"recompute": {"enable": True, "checkpoints": ["h0"]}}, 1)],
    "amp": [({"amp": {"enable": True}}, 1)],
    # The default last bucket (1 MB) holds the whole test model, so
    # comm_buffer_size is tried with a small one.
    "dp_optimization": [({"dp_optimization": {"comm_buffer_size": 25.0}}, 2),
                        ({"dp_optimization": {"last_comm_buffer_size": 0.001}},
                         2)],
    "hybrid": [({"sharding": {"enable": True, "degree": 2}}, 4)],
    "optimizer": [({"optimizer": dict(type=t, **sched)}, 1)
                  for t in OPTIMIZERS for sched in SCHEDULES],
}


def with_key(base, section, key, value):
    s = json.loads(json.dumps(base))
    s.setdefault(section, {})[key] = value
    return s


ignored = []
refused_bases = set()
checked = 0
for section, keys in defaults.items():
    for key, default in keys.items():
        name = "%s.%s" % (section, key)
        program = key_programs.pop(name, main_program)
        values = candidates(name, default)
        if not values:
            raise SystemExit("no non-default value for " + name)
        bases = list(BASES[section])
        if "enable" in keys and key != "enable":
            bases.append(({section: {"enable": False}}, 1))  # inactive section
        for base, world in bases:
            if key in base.get(section, {}):
                continue  # the base fixes this key
            before = compile_all(base, world, program)
            if before is None:
                # A section that is refused as a whole (not implemented):
                # so is every strategy that enables it.
                refused_bases.add(json.dumps(base))
                continue
            for value in values:
                variant = with_key(base, section, key, value)
                checked += 1
                after = compile_all(variant, world, program)
                if after is not None and after == before:
                    ignored.append("%s = %s on %s (world %d)" % (
                        name, json.dumps(value), json.dumps(base), world))
if key_programs:
    raise SystemExit("no such key: " + ", ".join(key_programs))
for base in sorted(refused_bases):
    print("refused as a whole:", base)
for line in ignored:
    print("ignored:", line)
print("%d settings of %d keys checked; %d silently ignored" % (
    checked, sum(len(k) for k in defaults.values()), len(ignored)))
