"""Installs the package with the libraries of a Strata build.

`pip install ./python` (from the checkout, after `bash .ci/build.sh`) copies
libStrataC.so and the CPU runtime it links, from $STRATA_BUILD_DIR (default:
the checkout's build/), into the package's lib/ directory.
"""

import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

LIBRARIES = ["libStrataC.so", "libstrata_runtime_cpu.so"]


class BuildWithLibraries(build_py):
    def run(self):
        super().run()
        here = os.path.dirname(os.path.abspath(__file__))
        build = os.environ.get("STRATA_BUILD_DIR",
                               os.path.join(os.path.dirname(here), "build"))
        target = os.path.join(self.build_lib, "strata", "lib")
        os.makedirs(target, exist_ok=True)
        for name in LIBRARIES:
            source = os.path.join(build, "lib", name)
            if not os.path.exists(source):
                raise SystemExit(
                    "strata: %s is not built; run `bash .ci/build.sh` in the "
                    "checkout first (or set STRATA_BUILD_DIR)" % source)
            shutil.copy2(source, os.path.join(target, name))


setup(cmdclass={"build_py": BuildWithLibraries})
