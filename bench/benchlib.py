"""Helpers shared by the benchmarks: the machine they ran on, and running
Strata's tools with the environment the benchmark started with."""

import os
import platform
import subprocess

# Strata's tools get the environment as it was at import, not the PyTorch
# pinning a benchmark sets afterwards (they take --cpu-threads).
STRATA_ENV = dict(os.environ)


def run(cmd):
    """Runs a command; returns its stdout (raises on failure)."""
    return subprocess.run(cmd, check=True, capture_output=True, text=True,
                          env=STRATA_ENV).stdout


def cpu_model():
    """The processor's model name, as every benchmark prints it."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
