# -*- Python -*-
import os

import lit.formats
from lit.llvm import llvm_config

config.name = "STRATA"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.strata_obj_root, "test")
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py.in", "unit",
                   "gpu"]

config.substitutions.append(("%strata_src_root", config.strata_src_root))
# Debian's interpreter, which has python3-torch.
config.substitutions.append(("%python", "/usr/bin/python3"))
config.substitutions.append(("%strata_obj_root", config.strata_obj_root))
# The environment of a test's own mpirun: its session directory and the
# ranks' shared-memory segments under the test's directory (a rank that a
# test makes fail leaves its segment behind, which /dev/shm would keep),
# shared-memory transport only, and root allowed (containers).
config.substitutions.append(
    ("%mpienv",
     "OMPI_MCA_orte_tmpdir_base=%t/mpi "
     "OMPI_MCA_btl_vader_backing_directory=%t/mpi OMPI_MCA_pml=ob1 "
     "OMPI_MCA_btl=self,vader OMPI_ALLOW_RUN_AS_ROOT=1 "
     "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"))
# C programs linked with the runtime link the sanitizers' runtimes too in a
# sanitizer build (STRATA_SANITIZE).
config.substitutions.append(
    ("%cc_sanitize",
     "-fsanitize=address,undefined" if config.strata_sanitize else ""))

# The Python package loads libStrataC.so into the interpreter, which a
# sanitizer build's library cannot be (the sanitizer runtime must come first).
if config.strata_sanitize:
    config.available_features.add("sanitize")

# The CUDA runtime is built (cuda-runtime), and GPUs can run it
# (cuda-device: the driver reports one; cuda-multi-device: two or more).
if config.strata_cuda:
    config.available_features.add("cuda-runtime")
    import subprocess
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True,
                                text=True, timeout=30)
        gpus = listed.stdout.count("GPU ") if listed.returncode == 0 else 0
        if gpus >= 1:
            config.available_features.add("cuda-device")
        # NCCL refuses two ranks on one GPU.
        if gpus >= 2:
            config.available_features.add("cuda-multi-device")
    except (OSError, subprocess.SubprocessError):
        pass

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

tool_dirs = [config.strata_tools_dir, config.llvm_tools_dir]
tools = ["strata-opt", "strata-gen", "strata-run", "strata-capi-train",
         "strata-kernel-check"]
if config.strata_cuda:
    tools.append("strata-cuda-nccl-bootstrap")
# The fuzzers (a build with STRATA_FUZZ=ON), run for a bounded time each.
if config.strata_fuzz:
    config.available_features.add("strata-fuzz")
    tools += ["strata-fuzz-Strategy", "strata-fuzz-Safetensors",
              "strata-fuzz-Program"]
config.substitutions.append(
    ("%fuzz_seconds", os.environ.get("STRATA_FUZZ_SECONDS", "30")))
llvm_config.add_tool_substitutions(tools, tool_dirs)
