"""ctypes declarations of Strata's C API and the Python objects over them."""

import ctypes
import numbers
import os
import threading
import warnings
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

# The C API version this binding is written against (STRATA_C_API_VERSION).
_API_VERSION = 4


def _find_library() -> str:
    """libStrataC.so: $STRATA_LIBRARY, else beside the package (an installed
    copy), else the build tree of the checkout ($STRATA_BUILD_DIR or build/)."""
    explicit = os.environ.get("STRATA_LIBRARY")
    if explicit:
        return explicit
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.path.join(here, "lib", "libStrataC.so")]
    root = os.path.dirname(os.path.dirname(here))
    build = os.environ.get("STRATA_BUILD_DIR", os.path.join(root, "build"))
    candidates.append(os.path.join(build, "lib", "libStrataC.so"))
    for path in candidates:
        if os.path.exists(path):
            return path
    raise ImportError(
        "strata: cannot find libStrataC.so (looked in %s); build Strata "
        "(bash .ci/build.sh) or set STRATA_LIBRARY" % ", ".join(candidates))


library_path = _find_library()
# An installed copy keeps the CPU runtime beside it: loaded first and
# globally, it satisfies libStrataC.so's dependency and the JIT-compiled
# step's calls.
_runtime = os.path.join(os.path.dirname(library_path),
                        "libstrata_runtime_cpu.so")
if os.path.exists(_runtime):
    ctypes.CDLL(_runtime, mode=ctypes.RTLD_GLOBAL)
# Locally: its LLVM and MLIR symbols must not interpose on other copies of
# LLVM in the process (PyTorch 2.x's Triton bundles one, and crashes on
# import after a global libMLIR).
_lib = ctypes.CDLL(library_path, mode=ctypes.RTLD_LOCAL)

_Session = ctypes.c_void_p
_ExecutableHandle = ctypes.c_void_p
_DiagnosticCallback = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p,
                                       ctypes.c_char_p, ctypes.c_void_p)


class _ExecutableOptions(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t),
                ("strategyPath", ctypes.c_char_p),
                ("worldSize", ctypes.c_int64),
                ("rank", ctypes.c_int64),
                ("backend", ctypes.c_char_p),
                ("seed", ctypes.c_uint64),
                ("threads", ctypes.c_int64),
                ("mpiComm", ctypes.c_void_p),
                ("blockingCollectives", ctypes.c_int),
                ("gemmAutotune", ctypes.c_int),
                ("collectiveTimeout", ctypes.c_double)]


class _TensorInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p),
                ("elementType", ctypes.c_int),
                ("rank", ctypes.c_int64),
                ("shape", ctypes.POINTER(ctypes.c_int64))]


class _MemoryPlan(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int64) for name in (
        "peak", "arena", "persistent", "inputs", "activations", "parameters",
        "gradients", "optimizerState", "scratch")]


def _declare(name, restype, *argtypes):
    fn = getattr(_lib, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)
    return fn


_apiVersion = _declare("strataApiVersion", ctypes.c_int)
_sessionCreate = _declare("strataSessionCreate", _Session)
_sessionDestroy = _declare("strataSessionDestroy", None, _Session)
_sessionParse = _declare("strataSessionParseProgram", ctypes.c_int, _Session,
                         ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p)
_sessionLastError = _declare("strataSessionLastError", ctypes.c_char_p,
                             _Session)
_sessionSetCallback = _declare("strataSessionSetDiagnosticCallback", None,
                               _Session, _DiagnosticCallback, ctypes.c_void_p)
_optionsInit = _declare("strataExecutableOptionsInit", None,
                        ctypes.POINTER(_ExecutableOptions))
_create = _declare("strataExecutableCreate", ctypes.c_int, _Session,
                   ctypes.POINTER(_ExecutableOptions),
                   ctypes.POINTER(_ExecutableHandle))
_destroy = _declare("strataExecutableDestroy", None, _ExecutableHandle)
_numInputs = _declare("strataExecutableNumInputs", ctypes.c_int64,
                      _ExecutableHandle)
_inputInfo = _declare("strataExecutableInputInfo", ctypes.c_int,
                      _ExecutableHandle, ctypes.c_int64,
                      ctypes.POINTER(_TensorInfo))
_readBatch = _declare("strataExecutableReadBatch", ctypes.c_int,
                      _ExecutableHandle, ctypes.c_char_p, ctypes.c_int,
                      ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p))
_step = _declare("strataExecutableStep", ctypes.c_int, _ExecutableHandle,
                 ctypes.POINTER(ctypes.c_void_p),
                 ctypes.POINTER(ctypes.c_double))
_load = _declare("strataExecutableLoadCheckpoint", ctypes.c_int,
                 _ExecutableHandle, ctypes.c_char_p,
                 ctypes.POINTER(ctypes.c_int64))
_save = _declare("strataExecutableSaveCheckpoint", ctypes.c_int,
                 _ExecutableHandle, ctypes.c_char_p, ctypes.c_int64)
_memoryPlan = _declare("strataExecutableMemoryPlan", ctypes.c_int,
                       _ExecutableHandle, ctypes.POINTER(_MemoryPlan))

# StrataDataFormat, by the names strata-run's --data-format takes.
_DATA_FORMATS = {"text": 0, "uint16": 1, "uint32": 2}

if _apiVersion() != _API_VERSION:
    raise ImportError("strata: %s has C API version %d, this package needs %d"
                      % (library_path, _apiVersion(), _API_VERSION))


def api_version() -> int:
    return _apiVersion()


_INT64 = (-(1 << 63), (1 << 63) - 1)


def _integer(what: str, value, low: int, high: int) -> int:
    """`value` as a Python int in [low, high]: TypeError for another type
    (bool included), ValueError outside the range (where C would wrap it)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError("%s must be an integer, got %s"
                        % (what, type(value).__name__))
    value = int(value)
    if not low <= value <= high:
        raise ValueError("%s must be in [%d, %d], got %d"
                         % (what, low, high, value))
    return value


def _path(what: str, value) -> bytes:
    """A path argument (str, bytes or os.PathLike) as the C API's bytes."""
    if not isinstance(value, (str, bytes, os.PathLike)):
        raise TypeError("%s must be a path (str or os.PathLike), got %s"
                        % (what, type(value).__name__))
    encoded = os.fsencode(value)
    if not encoded:
        raise ValueError("%s is an empty path" % what)
    if b"\0" in encoded:
        raise ValueError("%s contains a NUL character: %r" % (what, value))
    return encoded


_SEVERITIES = {0: "error", 1: "warning", 2: "note", 3: "remark"}
# The C API's element types (StrataElementType) as numpy types. bf16 has
# none in numpy: its inputs are float32 arrays, rounded to bf16 (to nearest
# even) on their way in, and read back as float32.
_BF16 = 3
_DTYPES = {0: np.float32, 1: np.int32, 2: np.int64, _BF16: np.float32,
           4: np.float16, 5: np.int8, 6: np.uint8}


def _to_bf16_bits(array: np.ndarray) -> np.ndarray:
    """float32 values rounded to bf16 (to nearest even; NaNs stay NaN), as
    their 16-bit patterns."""
    values = np.atleast_1d(np.asarray(array, np.float32))
    bits = values.view(np.uint32)
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1)))
               >> 16).astype(np.uint16)
    nan = np.isnan(values)
    rounded[nan] = ((bits[nan] >> 16) | np.uint32(0x40)).astype(np.uint16)
    return np.ascontiguousarray(rounded.reshape(np.shape(array)))


def _from_bf16_bits(bits: np.ndarray) -> np.ndarray:
    """bf16 patterns as float32 values (exactly)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


@dataclass(frozen=True)
class Diagnostic:
    severity: str  # "error", "warning", "note", "remark"
    location: str  # "file:line:col", or "" when the diagnostic has none
    message: str

    def __str__(self) -> str:
        where = self.location + ": " if self.location else ""
        return "%s%s: %s" % (where, self.severity, self.message)


class StrataWarning(UserWarning):
    """A warning of the compiler on a call that succeeded (a strategy key
    that changes nothing in the program, say); `diagnostic` is its
    Diagnostic."""

    def __init__(self, diagnostic: "Diagnostic"):
        super().__init__(str(diagnostic))
        self.diagnostic = diagnostic


class StrataError(Exception):
    """A failed call: the message is the compiler's, `diagnostics` its
    diagnostics one by one."""

    def __init__(self, message: str, diagnostics: Sequence[Diagnostic] = ()):
        super().__init__(message)
        self.diagnostics = list(diagnostics)


@dataclass(frozen=True)
class Input:
    """One input of the step. `bf16`: the program takes it in bf16, which
    Python gives and reads as float32 (`dtype`), rounded on the way in."""
    name: str
    dtype: np.dtype
    shape: tuple
    bf16: bool = False


@dataclass(frozen=True)
class MemoryPlan:
    """This rank's planned memory in bytes (see the C API's StrataMemoryPlan)."""
    peak: int
    arena: int
    persistent: int
    inputs: int
    activations: int
    parameters: int
    gradients: int
    optimizer_state: int
    scratch: int


class _Session:
    """A C API session and the diagnostics of its calls."""

    def __init__(self):
        self.handle = _sessionCreate()
        if not self.handle:
            raise MemoryError("strata: cannot create a session")
        self.diagnostics: List[Diagnostic] = []
        # The C session must outlive its executables: it is destroyed when
        # it was closed and the last of them is (the garbage collector may
        # finalise a session before the executables that hold it).
        self._executables = 0
        self._closing = False
        diagnostics = self.diagnostics  # (not `self`: no reference cycle)

        def collect(severity, location, message, _):
            diagnostics.append(Diagnostic(
                _SEVERITIES.get(severity, "error"),
                (location or b"").decode(errors="backslashreplace"),
                (message or b"").decode(errors="backslashreplace")))
        # Kept alive as long as the session: C holds the pointer.
        self._callback = _DiagnosticCallback(collect)
        _sessionSetCallback(self.handle, self._callback, None)

    def check(self, status: int) -> None:
        """Raises StrataError with the diagnostics of a failed call; issues
        the warnings of a call that succeeded as StrataWarning."""
        # stacklevel: warn, deliver, check, the strata function, its caller.
        self.deliver(self.outcome(status), stacklevel=5)

    def outcome(self, status: int):
        """What a call left (read before another call on the session): its
        StrataError, or the warnings of a call that succeeded."""
        if status == 0:
            return self.take_warnings()
        message = (_sessionLastError(self.handle) or
                   b"").decode(errors="backslashreplace").strip()
        errors = list(self.diagnostics)
        self.diagnostics.clear()
        return StrataError(message or "strata: the call failed", errors)

    def deliver(self, outcome, stacklevel: int) -> None:
        """Raises an outcome's error or issues its warnings (outside any
        lock: a warnings hook may call Strata again)."""
        if isinstance(outcome, StrataError):
            raise outcome
        self.warn(outcome, stacklevel=stacklevel)

    def take_warnings(self) -> List[Diagnostic]:
        """The warnings of the call that just succeeded; clears them all."""
        found = [d for d in self.diagnostics if d.severity == "warning"]
        self.diagnostics.clear()
        return found

    @staticmethod
    def warn(found: Sequence[Diagnostic], stacklevel: int) -> None:
        for d in found:
            warnings.warn(StrataWarning(d), stacklevel=stacklevel)

    def retain(self) -> None:
        """An executable of this session was created."""
        self._executables += 1

    def release(self) -> None:
        """An executable of this session was destroyed."""
        self._executables -= 1
        if self._closing and self._executables == 0:
            self._destroy()

    def close(self) -> None:
        self._closing = True
        if self._executables == 0:
            self._destroy()

    def _destroy(self) -> None:
        if self.handle:
            _sessionDestroy(self.handle)
            self.handle = None

    def __del__(self):
        self.close()


class Executable:
    """One rank of a training job: the compiled step, its weights and
    optimizer state. Made by `strata.compile`.

    Its calls are serialised (a lock): threads may share an executable,
    one call at a time. After `close()` (or leaving a `with` block) every
    call raises ValueError."""

    def __init__(self, session: _Session, handle):
        if not isinstance(session, _Session) or not handle:
            raise TypeError("a strata.Executable is made by strata.compile")
        self._session = session
        self._handle = handle
        self._lock = threading.Lock()
        session.retain()
        self._comm = None
        #: The job: this executable is `rank` of `world_size` ranks.
        self.world_size, self.rank = 1, 0
        inputs = []
        info = _TensorInfo()
        for i in range(_numInputs(handle)):
            session.check(_inputInfo(handle, i, ctypes.byref(info)))
            shape = tuple(info.shape[d] for d in range(info.rank))
            name = info.name.decode(errors="backslashreplace")
            dtype = _DTYPES.get(info.elementType)
            if dtype is None:
                raise StrataError("input '%s' has element type %d, which "
                                  "numpy has no type for"
                                  % (name, info.elementType))
            inputs.append(Input(name, np.dtype(dtype), shape,
                                info.elementType == _BF16))
        self._inputs: Tuple[Input, ...] = tuple(inputs)

    @property
    def inputs(self) -> Tuple[Input, ...]:
        """The step's inputs in order (name, dtype, shape): the global
        batch."""
        return self._inputs

    def _live(self):
        """The C handle; ValueError once closed. Called under the lock."""
        if not self._handle:
            raise ValueError("this strata.Executable is closed")
        return self._handle

    def __copy__(self):
        raise TypeError("a strata.Executable cannot be copied (it owns the "
                        "compiled step and its state): save a checkpoint "
                        "and load it into another")

    def __deepcopy__(self, memo):
        self.__copy__()

    def __reduce__(self):
        self.__copy__()

    def _buffers(self, batch) -> List[np.ndarray]:
        if isinstance(batch, dict):
            missing = [i.name for i in self.inputs if i.name not in batch]
            if missing:
                raise ValueError("the batch has no %s" % ", ".join(missing))
            names = {i.name for i in self.inputs}
            unknown = [str(k) for k in batch if k not in names]
            if unknown:
                raise ValueError(
                    "the batch has %s, which the step does not take (it "
                    "takes %s)" % (", ".join(unknown),
                                   ", ".join(i.name for i in self.inputs)))
            batch = [batch[i.name] for i in self.inputs]
        batch = list(batch)
        if len(batch) != len(self.inputs):
            raise ValueError("the step takes %d inputs (%s), got %d"
                             % (len(self.inputs),
                                ", ".join(i.name for i in self.inputs),
                                len(batch)))
        arrays = []
        for spec, value in zip(self.inputs, batch):
            array = np.ascontiguousarray(value)
            if array.dtype != spec.dtype or array.shape != spec.shape:
                raise ValueError(
                    "input '%s' must be %s of shape %s, got %s of shape %s"
                    % (spec.name, spec.dtype, spec.shape, array.dtype,
                       array.shape))
            arrays.append(_to_bf16_bits(array) if spec.bf16 else array)
        return arrays

    @staticmethod
    def _pointers(arrays) -> ctypes.Array:
        return (ctypes.c_void_p * len(arrays))(
            *[a.ctypes.data_as(ctypes.c_void_p) for a in arrays])

    def _call(self, function, *args) -> None:
        """Calls `function` of the C API on this executable, one thread at a
        time; raises its error or issues its warnings, at the caller of the
        public method (outside the lock: a warnings hook may call again)."""
        with self._lock:
            outcome = self._session.outcome(function(self._live(), *args))
        # stacklevel: warn, deliver, _call, the public method, its caller.
        self._session.deliver(outcome, stacklevel=5)

    def read_batch(self, step: int,
                   data: Optional[Union[str, os.PathLike]] = None,
                   format: str = "text") -> Dict[str, np.ndarray]:
        """Batch `step` of the data stream strata-run uses (token ids of
        `data`, by default the licence texts: a text file or a directory of
        them with format "text", a file of little-endian ids with "uint16"
        or "uint32"; the MLP's synthetic task), as {input name: array}."""
        step = _integer("read_batch's step", step, 0, _INT64[1])
        path = None if data is None else _path("read_batch's data", data)
        if not isinstance(format, str):
            raise TypeError("read_batch's format must be a str, got %s"
                            % type(format).__name__)
        if format not in _DATA_FORMATS:
            raise ValueError("read_batch's format must be one of %s, got %r"
                             % (", ".join(_DATA_FORMATS), format))
        arrays = [np.empty(i.shape, np.uint16 if i.bf16 else i.dtype)
                  for i in self.inputs]
        self._call(_readBatch, path, _DATA_FORMATS[format], step,
                   self._pointers(arrays))
        return {i.name: _from_bf16_bits(a) if i.bf16 else a
                for i, a in zip(self.inputs, arrays)}

    def step(self, batch) -> float:
        """Trains one step on the global batch (a dict by input name or a
        sequence in input order) and returns the loss."""
        arrays = self._buffers(batch)
        loss = ctypes.c_double()
        self._call(_step, self._pointers(arrays), ctypes.byref(loss))
        return loss.value

    def save(self, path: Union[str, os.PathLike], steps_done: int = 0) -> None:
        """Writes the weights and optimizer state (safetensors)."""
        encoded = _path("save's path", path)
        # (Its range, [0, 2^53], is checked by every rank together: a rank
        # that raised here would leave the others waiting in the save.)
        steps_done = _integer("steps_done", steps_done, -(1 << 63),
                              (1 << 63) - 1)
        self._call(_save, encoded, steps_done)

    def load(self, path: Union[str, os.PathLike]) -> int:
        """Reads a checkpoint (any strategy's); returns its steps done."""
        encoded = _path("load's path", path)
        done = ctypes.c_int64()
        self._call(_load, encoded, ctypes.byref(done))
        return done.value

    def memory_plan(self) -> MemoryPlan:
        plan = _MemoryPlan()
        self._call(_memoryPlan, ctypes.byref(plan))
        return MemoryPlan(plan.peak, plan.arena, plan.persistent, plan.inputs,
                          plan.activations, plan.parameters, plan.gradients,
                          plan.optimizerState, plan.scratch)

    def close(self) -> None:
        """Frees the executable (idempotent); a call in another thread
        finishes first."""
        lock = getattr(self, "_lock", None)
        if lock is None:  # __init__ refused its arguments
            return
        with lock:
            if self._handle:
                _destroy(self._handle)
                self._handle = None
                self._session.release()

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.close()


def _mpi_world_size_from_environment() -> int:
    """The size of the job mpirun (or another MPI launcher) started this
    process in; 1 outside one."""
    for key in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"):
        if os.environ.get(key, "").isdigit():
            return int(os.environ[key])
    return 1


def _program_text(program) -> Tuple[bytes, str]:
    """The program's bytes and the name its diagnostics give it: a path
    (os.PathLike, or a one-line str naming a file) is read; other str and
    bytes are the program itself (MLIR text, or bytecode)."""
    if isinstance(program, (bytearray, memoryview)):
        program = bytes(program)
    if isinstance(program, bytes):
        return program, "<program>"
    if isinstance(program, str) and "\n" in program:
        return program.encode(), "<program>"
    if isinstance(program, (str, os.PathLike)):
        path = os.fspath(program)
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        # A one-line str is a path unless it reads as MLIR (a one-line
        # program has braces or an op's %/@ names).
        if isinstance(program, os.PathLike) or os.path.exists(path) or \
                not any(c in path for c in "{}%@"):
            if "\0" in path:
                raise ValueError("the program's path contains a NUL "
                                 "character: %r" % path)
            try:
                with open(path, "rb") as f:
                    return f.read(), path
            except FileNotFoundError:
                raise FileNotFoundError(
                    "strata.compile: no program file '%s' (a program is "
                    "MLIR text, bytes, or the path of a file)" % path) from None
        return program.encode(), "<program>"
    raise TypeError("program must be MLIR text (str), bytes, or a path "
                    "(os.PathLike), got %s" % type(program).__name__)


def compile(program: Union[str, bytes, os.PathLike], *,
            strategy: Optional[Union[str, os.PathLike]] = None,
            comm=None, world_size: Optional[int] = None,
            rank: Optional[int] = None, backend: str = "cpu", seed: int = 0,
            threads: int = 1, gemm_autotune: bool = False,
            collective_timeout: float = 1800.0,
            name: Optional[str] = None) -> Executable:
    """Compiles a training program (MLIR text of the strata dialect, or the
    path of a .mlir file) with a strategy file for one rank of a job, and
    creates the backend's executable ("cpu" or "reference") with the initial
    weights of `seed`. `gemm_autotune` ("cpu"): time each distinct f32 GEMM
    once through each implementation at hand (oneDNN's matmul primitive and
    sgemm, Strata's packed GEMM) and run the fastest.
    `collective_timeout`: in a job of several ranks, the seconds a rank may
    wait for its peers in one MPI call before it ends the process, saying
    so (0: for ever).

    The job: `comm`, an mpi4py communicator whose ranks are the job's; under
    mpirun without `comm`, mpi4py's COMM_WORLD; otherwise one rank. Every
    rank of a job calls compile, and step, with the same arguments."""
    # Argument types and ranges first: C would wrap or misread them.
    if strategy is not None:
        strategy = _path("strategy", strategy)
    if not isinstance(backend, str):
        raise TypeError("backend must be a str ('cpu', 'cuda' or "
                        "'reference'), got %s" % type(backend).__name__)
    if name is not None and not isinstance(name, str):
        raise TypeError("name must be a str, got %s" % type(name).__name__)
    if not isinstance(gemm_autotune, (bool, np.bool_)):
        raise TypeError("gemm_autotune must be a bool, got %s"
                        % type(gemm_autotune).__name__)
    if isinstance(collective_timeout, bool) or not isinstance(
            collective_timeout, (int, float, np.integer, np.floating)):
        raise TypeError("collective_timeout must be a number of seconds, "
                        "got %s" % type(collective_timeout).__name__)
    seed = _integer("seed", seed, 0, (1 << 64) - 1)
    threads = _integer("threads", threads, *_INT64)
    if world_size is not None:
        world_size = _integer("world_size", world_size, *_INT64)
    if rank is not None:
        rank = _integer("rank", rank, *_INT64)
    if comm is not None and not (hasattr(comm, "Get_size")
                                 and hasattr(comm, "Get_rank")):
        raise TypeError("comm must be an mpi4py communicator, got %s"
                        % type(comm).__name__)
    if comm is None and world_size is None and \
            _mpi_world_size_from_environment() > 1:
        try:
            from mpi4py import MPI
        except ImportError as e:
            raise StrataError(
                "strata.compile: this process is one of %d MPI ranks, and "
                "joining them needs mpi4py (Debian: python3-mpi4py); pass "
                "world_size=1 to train this rank alone"
                % _mpi_world_size_from_environment()) from e
        comm = MPI.COMM_WORLD
    comm_address = None
    if comm is not None:
        from mpi4py import MPI
        if world_size is not None and world_size != comm.Get_size():
            raise ValueError("world_size %d differs from the communicator's "
                             "%d ranks" % (world_size, comm.Get_size()))
        if rank is not None and rank != comm.Get_rank():
            raise ValueError("rank %d differs from the communicator's rank %d"
                             % (rank, comm.Get_rank()))
        world_size, rank = comm.Get_size(), comm.Get_rank()
        comm_address = MPI._addressof(comm)
    world_size = 1 if world_size is None else world_size
    rank = 0 if rank is None else rank
    if world_size > 1 and comm_address is None:
        raise ValueError("strata.compile: a job of %d ranks needs comm= (an "
                         "mpi4py communicator of its ranks)" % world_size)
    text, source = _program_text(program)
    name = name or source
    session = _Session()
    session.check(_sessionParse(session.handle, text, len(text),
                                os.fsencode(name)))
    options = _ExecutableOptions()
    _optionsInit(ctypes.byref(options))
    backend_bytes = backend.encode()
    options.strategyPath = strategy
    options.worldSize = world_size
    options.rank = rank
    options.backend = backend_bytes
    options.seed = seed
    options.threads = threads
    options.gemmAutotune = int(gemm_autotune)
    options.collectiveTimeout = float(collective_timeout)
    options.mpiComm = comm_address
    handle = _ExecutableHandle()
    status = _create(session.handle, ctypes.byref(options),
                     ctypes.byref(handle))
    if status != 0:
        session.check(status)
    # The executable owns its handle before any warning is issued (a
    # warnings filter may turn one into an exception).
    found = session.take_warnings()
    executable = Executable(session, handle)
    executable.world_size, executable.rank = world_size, rank
    # The communicator must outlive the executable.
    executable._comm = comm
    session.warn(found, stacklevel=3)  # warn, compile, its caller
    return executable
