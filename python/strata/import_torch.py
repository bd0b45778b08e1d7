"""Import a PyTorch model and its loss as a Strata training program.

    import strata.import_torch as it
    program = it.import_module(model, (x, y), loss_fn=F.cross_entropy)
    program.save_weights("init.safetensors")
    exe = strata.compile(program.text, strategy="adamw.yaml")
    exe.load("init.safetensors")          # PyTorch's initial weights
    ...                                   # exe.step(program.batch(x, y))
    exe.save("trained.safetensors")
    it.load_state_dict(model, "trained.safetensors")  # back into PyTorch

The forward of the module and the loss are captured as a graph of ATen ops
with shapes (`torch.export` on PyTorch 2.x, `make_fx` on 1.13), and each op
becomes ops of the
strata dialect: parameters named by the module's `state_dict` keys (a tied
weight once, by its first name), the batch as the step's arguments. Autodiff,
the optimizer and every strategy then apply as for generated programs.

Values computed from constants alone (`torch.arange`, a registered causal
mask, rotary tables), or from nothing but the inputs' shapes, are evaluated
at import time. A causal mask applied
before a softmax (`masked_fill` with -inf, or `torch.where`) becomes the
softmax's `causal` form; dropout becomes `strata.dropout` (masks follow
Strata's random stream, not PyTorch's). Ops of a numbered submodule (`h.3`,
`layers.0`) are tagged with its name as their `strata.layer`, which pipeline
stages and recompute cut along.

Anything else is an error naming the ATen op (and the Python line, when
PyTorch recorded it), never a wrong program.
"""

import json
import math
import operator
import os
import re
import struct
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

import torch
from torch.fx.experimental.proxy_tensor import make_fx

try:  # PyTorch 2.x
    from torch.func import functional_call
except ImportError:  # PyTorch 1.13
    from torch.nn.utils.stateless import functional_call


class UnsupportedError(Exception):
    """An op, or a use of one, that the importer cannot express."""


_aten = torch.ops.aten
_BARE_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_$.]*$")
_LAYER = re.compile(r"^(.*?\.\d+)\.")
_INT_TYPES = (torch.int64, torch.int32)


def _symbol(name: str) -> str:
    # (MLIR's strings take UTF-8 as it is, and \" and \\ escapes.)
    return "@" + name if _BARE_ID.match(name) else \
        "@" + json.dumps(name, ensure_ascii=False)


def _tensor_type(shape, element: str) -> str:
    if len(shape) == 0:
        return "tensor<%s>" % element
    return "tensor<%sx%s>" % ("x".join(str(d) for d in shape), element)


def _f64(x: float) -> str:
    return "%.17e : f64" % x


def _ops(*names):
    """The overloads of `aten.NAME` that this PyTorch has."""
    found = []
    for name in names:
        base, _, overload = name.partition(".")
        packet = getattr(_aten, base, None)
        if packet is not None and hasattr(packet, overload or "default"):
            found.append(getattr(packet, overload or "default"))
    return tuple(found)


@dataclass
class ImportedProgram:
    """The program (MLIR text of the strata dialect), its initial weights by
    parameter name, and its inputs (name, NumPy dtype) in argument order."""
    text: str
    weights: Dict[str, np.ndarray]
    inputs: List[tuple] = field(default_factory=list)

    def save_weights(self, path: str) -> None:
        """The weights as safetensors (what `strata-run --init` and
        `Executable.load` read)."""
        header, offset, blobs = {}, 0, []
        for name, array in self.weights.items():
            data = np.ascontiguousarray(array, np.float32).tobytes()
            header[name] = {"dtype": "F32", "shape": list(array.shape),
                            "data_offsets": [offset, offset + len(data)]}
            offset += len(data)
            blobs.append(data)
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(text)))
            f.write(text)
            for blob in blobs:
                f.write(blob)

    def save(self, path: str) -> None:
        """The program text as a .mlir file (what `strata-run` and
        `strata-opt` read)."""
        with open(path, "w") as f:
            f.write(self.text)

    def batch(self, *tensors) -> List[np.ndarray]:
        """PyTorch tensors of the step's inputs as the arrays the executable
        takes (class indices become int32: ValueError for a floating-point
        tensor or an index past int32's range, which the conversion would
        truncate or wrap)."""
        if len(tensors) != len(self.inputs):
            raise ValueError("the step takes %d inputs (%s), got %d" % (
                len(self.inputs), ", ".join(n for n, _ in self.inputs),
                len(tensors)))
        arrays = []
        for t, (name, dtype) in zip(tensors, self.inputs):
            value = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) \
                else np.asarray(t)
            if np.issubdtype(dtype, np.integer):
                if not np.issubdtype(value.dtype, np.integer):
                    raise ValueError("input '%s' holds indices: got %s"
                                     % (name, value.dtype))
                limits = np.iinfo(dtype)
                if value.size and (value.min() < limits.min or
                                   value.max() > limits.max):
                    raise ValueError("input '%s': an index outside %s's range"
                                     % (name, np.dtype(dtype)))
            arrays.append(value.astype(dtype))
        return arrays


def read_safetensors(path: str) -> Dict[str, np.ndarray]:
    """The tensors of a safetensors file (a Strata checkpoint or weights);
    BF16 tensors as float32 (exactly)."""
    kinds = {"F32": np.float32, "F64": np.float64, "I32": np.int32,
             "I64": np.int64, "F16": np.float16, "BF16": np.uint16,
             "U8": np.uint8, "I8": np.int8}
    with open(path, "rb") as f:
        contents = f.read()

    def damaged(why):
        return ValueError("'%s' is not a safetensors file: %s" % (path, why))

    if len(contents) < 8:
        raise damaged("shorter than its 8-byte header size")
    size = struct.unpack("<Q", contents[:8])[0]
    if size > len(contents) - 8:
        raise damaged("its header of %d bytes runs past the end" % size)
    try:
        header = json.loads(contents[8:8 + size])
    except (ValueError, RecursionError) as e:
        raise damaged("its header is not JSON (%s)" % e) from None
    if not isinstance(header, dict):
        raise damaged("its header is not a JSON object")
    data = memoryview(contents)[8 + size:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = np.dtype(kinds[entry["dtype"]])
            begin, end = (int(o) for o in entry["data_offsets"])
            shape = [int(d) for d in entry["shape"]]
            if not 0 <= begin <= end <= len(data) or \
                    end - begin != dtype.itemsize * int(np.prod(shape)):
                raise ValueError("its bytes %d..%d do not hold %s %s"
                                 % (begin, end, entry["dtype"], shape))
            value = np.frombuffer(data[begin:end], dtype=dtype).reshape(shape)
            if entry["dtype"] == "BF16":
                # bfloat16 is the upper half of a float32: exact.
                value = (value.astype(np.uint32) << 16).view(np.float32)
            tensors[name] = value
        except (KeyError, TypeError, ValueError) as e:
            raise damaged("tensor '%s': %s" % (name, e)) from None
    return tensors


def load_state_dict(module: torch.nn.Module, path: str) -> List[str]:
    """Copies the parameters of a Strata checkpoint (`Executable.save`,
    `strata-run --save`) into the module imported from, in place: training
    goes on in PyTorch, or the model is saved with `torch.save`. Returns the
    names loaded; a parameter missing from the checkpoint (but one with
    requires_grad=False, a constant of the program), or of another shape,
    is an error."""
    tensors = read_safetensors(path)
    loaded = []
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name not in tensors and not p.requires_grad:
                continue
            if name not in tensors:
                raise KeyError("strata.import_torch: %s has no parameter "
                               "'%s'" % (path, name))
            value = tensors[name]
            if tuple(value.shape) != tuple(p.shape):
                raise ValueError("strata.import_torch: '%s' is %s in %s, %s "
                                 "in the module" % (name, list(value.shape),
                                                    path, list(p.shape)))
            p.copy_(torch.from_numpy(np.array(value, np.float32)))
            loaded.append(name)
    return loaded


# PyTorch's own sources, whose frames are not the model's.
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))


def _inside(path: str, directory: str) -> bool:
    """Whether the file `path` lies under `directory`."""
    path = os.path.abspath(path)
    return path.startswith(directory + os.sep)


# PyTorch 2.x records a node's stack outermost frame first (as a traceback
# lists it), PyTorch 1.13 innermost first.
_FRAMES_OUTERMOST_FIRST = not torch.__version__.startswith("1.")


def _where(node) -> str:
    """" at FILE:LINE (code)" of the model's source that made `node`, when
    PyTorch recorded it; "" otherwise: the innermost frame outside PyTorch
    and this file."""
    trace = node.meta.get("stack_trace") if hasattr(node, "meta") else None
    if not trace:
        return ""
    lines = trace.splitlines()
    frames = []
    for i, line in enumerate(lines):
        match = re.match(r'\s*File "([^"]+)", line (\d+)', line)
        if not match:
            continue
        path = match.group(1)
        if path.startswith("<") or _inside(path, _TORCH_DIR) or \
                os.path.abspath(path) == os.path.abspath(__file__):
            continue
        code = lines[i + 1].strip() if i + 1 < len(lines) else ""
        frames.append(" at %s:%s (%s)" % (path, match.group(2), code))
    if not frames:
        return ""
    return frames[-1] if _FRAMES_OUTERMOST_FIRST else frames[0]


def _is_view(node) -> bool:
    """Whether `node`'s result may share the storage of an input (its
    schema says it aliases one without writing it: view, slice, transpose,
    detach, contiguous, to ...; a part of a split is a view of its input),
    so that an in-place update of either changes the other. An in-place
    op's own result (an alias that writes) is not: the capture reads the
    updated tensor through it."""
    if node.target is operator.getitem:
        source = node.args[0]
        return isinstance(source, torch.fx.Node) and _is_view(source)
    schema = getattr(node.target, "_schema", None)
    return schema is not None and any(
        r.alias_info is not None and not r.alias_info.is_write
        for r in schema.returns)


def _tied_names(module: torch.nn.Module) -> Dict[str, str]:
    """Every name a parameter is reachable by -> the name `named_parameters`
    gives it (tied weights, such as a language model's head sharing the
    token embedding, have several)."""
    first = {id(p): n for n, p in module.named_parameters()}
    aliases = {}
    for prefix, sub in module.named_modules(remove_duplicate=False):
        for name, p in sub._parameters.items():
            if p is not None:
                full = prefix + "." + name if prefix else name
                aliases[full] = first[id(p)]
    return aliases


def _check_input_names(names: Sequence[str]) -> None:
    """ValueError unless the names are distinct, printable and free of the
    quotes and backslashes of the program's attribute strings."""
    for name in names:
        if not isinstance(name, str) or not name or not name.isprintable() \
                or '"' in name or "\\" in name:
            raise ValueError("strata.import_torch: input name %r is not a "
                             "printable name without quotes or backslashes"
                             % (name,))
    if len(set(names)) != len(names):
        raise ValueError("strata.import_torch: input names %s repeat a name"
                         % ", ".join(names))


def import_module(module: torch.nn.Module, example_inputs: Sequence,
                  loss_fn: Optional[Callable] = None,
                  input_names: Sequence[str] = None,
                  capture: str = "auto") -> ImportedProgram:
    """Captures `loss_fn(module(*example_inputs[:-1]), example_inputs[-1])`
    and emits it as a Strata training step over the module's parameters.
    The last example input is the target of the loss. Without `loss_fn`,
    the module's forward takes every input and returns the loss.

    `capture`: "export" (`torch.export`, PyTorch 2.x), "make_fx" (PyTorch
    1.13 and 2.x), or "auto": export where PyTorch has it."""
    params = {name: p.detach() for name, p in module.named_parameters()}
    # Parameters that do not train (requires_grad=False) are constants of
    # the program, as buffers are.
    frozen = {name for name, p in module.named_parameters()
              if not p.requires_grad}
    if len(frozen) == len(params):
        raise UnsupportedError(
            "strata.import_torch: the module has no parameter to train "
            "(%s)" % ("every one has requires_grad=False" if params
                      else "it has none"))
    inputs = list(example_inputs)
    if not inputs:
        raise ValueError("strata.import_torch: example_inputs is empty: give "
                         "the step's inputs (with loss_fn, the target last)")
    for i, t in enumerate(inputs):
        if not isinstance(t, torch.Tensor):
            raise TypeError("strata.import_torch: example input %d is a %s: "
                            "the step's inputs are tensors"
                            % (i, type(t).__name__))
    if loss_fn is not None and len(inputs) < 2:
        raise ValueError("strata.import_torch: with loss_fn, example_inputs "
                         "holds the model's inputs and then the target")
    if input_names:
        names = list(input_names)
    elif loss_fn is None:
        names = ["input%d" % i for i in range(len(inputs))]
    else:
        names = ["input%d" % i for i in range(len(inputs) - 1)] + ["target"]
    if len(names) != len(inputs):
        raise UnsupportedError("strata.import_torch: %d input names for %d "
                               "inputs" % (len(names), len(inputs)))
    _check_input_names(names)
    if capture == "auto":
        capture = "export" if hasattr(torch, "export") else "make_fx"
    if capture not in ("export", "make_fx"):
        raise ValueError("strata.import_torch: capture must be 'auto', "
                         "'export' or 'make_fx', not %r" % (capture,))
    if capture == "export" and not hasattr(torch, "export"):
        raise ValueError("strata.import_torch: capture='export' needs "
                         "torch.export (PyTorch 2.x); this is PyTorch %s: use "
                         "'make_fx' or 'auto'" % torch.__version__)
    # The step trains: a module in eval mode is captured in training mode
    # (its dropout on). A module in training mode is captured as it is, so
    # that a submodule the user put in eval mode (a dropout turned off)
    # stays so. Every submodule's mode is restored after.
    modes = [(m, m.training) for m in module.modules()]
    if not module.training:
        module.train()
    try:
        # The check's forward draws the capture's random numbers (a layer
        # dropped at random takes the same branch), and the caller's
        # generators are left as the capture left them.
        before = _rng_states()
        traced, roles = _capture(module, loss_fn, inputs, params, frozen,
                                 capture)
        program = _Emitter(traced, roles, params, inputs, names).emit()
        after = _rng_states()
        _set_rng_states(before)
        try:
            _check_gradients(module, loss_fn, inputs, traced, roles, frozen)
        finally:
            _set_rng_states(after)
    finally:
        for m, training in modes:
            m.training = training
    return program


def _rng_states():
    import random
    return torch.get_rng_state(), random.getstate(), np.random.get_state()


def _set_rng_states(states):
    import random
    torch.set_rng_state(states[0])
    random.setstate(states[1])
    np.random.set_state(states[2])


def _params_reaching_loss(traced, roles):
    """The parameters (by name) whose values reach the loss, the first
    output, in the captured graph: dead nodes, other outputs and ops that
    read only shapes do not count."""
    placeholders = [n for n in traced.graph.nodes if n.op == "placeholder"]
    param_of = {node: role[1] for node, role in zip(placeholders, roles)
                if role[0] == "param"}
    output = next(n for n in traced.graph.nodes if n.op == "output")
    out = output.args[0]
    out = out[0] if isinstance(out, (list, tuple)) else out
    reached, stack, seen = set(), [out], set()
    while stack:
        node = stack.pop()
        if not isinstance(node, torch.fx.Node) or node in seen:
            continue
        seen.add(node)
        if node in param_of:
            reached.add(param_of[node])
        if node.op == "call_function" and node.target in _SHAPE_ONLY:
            continue
        stack.extend(node.all_input_nodes)
    return reached


def _check_gradients(module, loss_fn, inputs, traced, roles, frozen):
    """Refuses what the imported step would differentiate otherwise than
    PyTorch: Strata's autodiff differentiates every op of the captured
    forward, so a gradient PyTorch does not take (torch.no_grad, .data) or
    takes its own way (a custom autograd.Function) would train another
    model. One forward and backward in PyTorch on the example inputs finds
    them: each parameter the step reads must get a gradient there, and no
    custom Function may be on the way."""
    for name, m in module.named_modules():
        if getattr(m, "_backward_hooks", None) or \
                getattr(m, "_backward_pre_hooks", None):
            raise UnsupportedError(
                "strata.import_torch: module '%s' has a backward hook, which "
                "the imported step would not run (Strata differentiates the "
                "forward's ops)" % (name or type(m).__name__))
    read = _params_reaching_loss(traced, roles)
    trainable = {name: p for name, p in module.named_parameters()
                 if p.requires_grad and name not in frozen}
    names = sorted(n for n in read if n in trainable)
    with torch.enable_grad():
        out = module(*inputs) if loss_fn is None else \
            loss_fn(module(*inputs[:-1]), inputs[-1])
        # (The output the emitter takes: the first of the flattened ones.)
        flat = torch.utils._pytree.tree_flatten(out)[0]
        loss = flat[0] if flat else None
        if not isinstance(loss, torch.Tensor):
            return  # (the emitter said what it makes of the output)
        if loss.grad_fn is None:
            if names:
                raise UnsupportedError(
                    "strata.import_torch: the loss gets no gradient in "
                    "PyTorch (computed under torch.no_grad, or from detached "
                    "values), while the imported step would train %s"
                    % ", ".join("'%s'" % n for n in names))
            return
        seen, stack = set(), [loss.grad_fn]
        while stack:
            fn = stack.pop()
            if fn is None or fn in seen:
                continue
            seen.add(fn)
            if isinstance(fn, torch.autograd.function.BackwardCFunction):
                raise UnsupportedError(
                    "strata.import_torch: the loss depends on a custom "
                    "torch.autograd.Function (%s) whose own backward the "
                    "imported step would not use (Strata differentiates the "
                    "forward's ops)" % type(fn).__name__)
            stack.extend(f for f, _ in fn.next_functions)
        grads = torch.autograd.grad(loss, [trainable[n] for n in names],
                                    allow_unused=True) if names else []
    for name, grad in zip(names, grads):
        if grad is None:
            raise UnsupportedError(
                "strata.import_torch: parameter '%s' is read by the step but "
                "gets no gradient in PyTorch (under torch.no_grad, or through "
                ".data or detach()): the imported step would train it"
                % name)


class CaptureError(Exception):
    """The model (with its loss) failed on the example inputs: PyTorch's
    exception is the cause."""


def _capture(module, loss_fn, inputs, params, frozen, capture):
    """The graph of the step, PyTorch's own failures as CaptureError."""
    try:
        if capture == "export":
            return _capture_export(module, loss_fn, inputs, params, frozen)
        return _capture_make_fx(module, loss_fn, inputs, params, frozen)
    except UnsupportedError:
        raise
    except Exception as e:  # noqa: BLE001 - PyTorch's, kept as the cause
        shapes = ", ".join("%s %s" % (tuple(t.shape), t.dtype)
                           if isinstance(t, torch.Tensor) else type(t).__name__
                           for t in inputs)
        raise CaptureError("strata.import_torch: the model (with its loss) "
                           "did not run on the inputs %s: %s: %s"
                           % (shapes, type(e).__name__, e)) from e


def _capture_make_fx(module, loss_fn, inputs, params, frozen):
    """The graph and what each placeholder is: ("param", name) (or
    ("const", tensor) for a `frozen` parameter), then ("input", index)."""
    aliases = _tied_names(module)

    def step(params, *batch):
        full = {alias: params[name] for alias, name in aliases.items()}
        if loss_fn is None:
            return functional_call(module, full, tuple(batch))
        out = functional_call(module, full, tuple(batch[:-1]))
        return loss_fn(out, batch[-1])

    # Each node keeps the Python stack that made it, for the errors.
    from torch.fx.experimental import proxy_tensor
    tracer = proxy_tensor.PythonKeyTracer
    recorded = tracer.record_stack_traces
    tracer.record_stack_traces = True
    try:
        traced = make_fx(step)(params, *inputs)
    finally:
        tracer.record_stack_traces = recorded
    roles = [("const", params[name]) if name in frozen else ("param", name)
             for name in params] + [("input", i) for i in range(len(inputs))]
    return traced, roles


class _Step(torch.nn.Module):
    """The module and its loss as one module, for torch.export."""

    def __init__(self, module, loss_fn):
        super().__init__()
        self.module, self.loss_fn = module, loss_fn

    def forward(self, *batch):
        if self.loss_fn is None:
            return self.module(*batch)
        return self.loss_fn(self.module(*batch[:-1]), batch[-1])


def _capture_export(module, loss_fn, inputs, params, frozen):
    """torch.export's graph (training IR) and what each placeholder is:
    ("param", name), ("const", tensor) for buffers, lifted constants and
    `frozen` parameters, ("input", index)."""
    from torch.export.graph_signature import InputKind
    exported = torch.export.export(_Step(module, loss_fn), tuple(inputs))
    aliases = _tied_names(module)
    roles, user = [], 0
    for spec in exported.graph_signature.input_specs:
        target = spec.target[len("module."):] if spec.target and \
            spec.target.startswith("module.") else spec.target
        if spec.kind == InputKind.PARAMETER:
            name = aliases.get(target, target)
            roles.append(("const", params[name]) if name in frozen
                         else ("param", name))
        elif spec.kind in (InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            value = exported.state_dict.get(spec.target)
            if value is None:
                value = exported.constants[spec.target]
            roles.append(("const", value.detach()))
        elif spec.kind == InputKind.USER_INPUT:
            roles.append(("input", user))
            user += 1
        else:
            raise UnsupportedError("strata.import_torch: torch.export input "
                                   "%s of kind %s" % (spec.arg.name,
                                                      spec.kind))
    return exported.graph_module, roles


# Values of the graph as the emitter sees them.
@dataclass
class _Tensor:
    """An SSA value of the program."""
    ssa: str
    shape: tuple
    element: str = "f32"


@dataclass
class _Param:
    """A parameter, read with strata.get_param when first used."""
    name: str
    shape: tuple


@dataclass
class _Const:
    """A value known at import time (computed from constants alone)."""
    value: torch.Tensor


@dataclass
class _Transposed:
    """`source` with its last two dimensions swapped (aten.t, a transpose
    of the last two dimensions): folded into the product that reads it, a
    strata.transpose for any other reader. `source`: a node, or a tensor or
    view of one (a transposed batch viewed with other batch dimensions)."""
    source: object


@dataclass
class _View:
    """`base` in another shape: a strata.reshape where it is read."""
    base: _Tensor
    shape: tuple


@dataclass
class _Masked:
    """Attention scores with the causal mask applied (entries above the
    diagonal at -inf); only a softmax may read them."""
    scores: _Tensor


@dataclass
class _DropMask:
    """bernoulli_(empty_like(x), keep) / keep: PyTorch's dropout mask."""
    keep: float
    scaled: bool


@dataclass
class _LogSoftmax:
    """log_softmax(logits): only the NLL loss (cross-entropy) may read it."""
    logits: _Tensor


@dataclass
class _Unavailable:
    why: str


@dataclass
class _Tuple:
    items: list


_IDENTITY = _ops("clone", "contiguous", "alias", "lift_fresh_copy",
                 "lift_fresh")
# Ops that stop the gradient where the user asked for it.
_STOP_GRADIENT = _ops("detach")
_VIEWS = _ops("view", "_unsafe_view", "reshape", "_reshape_alias",
              "view.default", "flatten.using_ints", "unsqueeze", "squeeze.dim",
              "squeeze")
_SHAPE_ONLY = _ops("new_ones", "new_zeros", "new_full", "new_empty",
                  "ones_like", "zeros_like", "full_like")
_CHECKS = _ops("_assert_tensor_metadata", "_assert_scalar",
               "sym_constrain_range_for_size")
_RANDOM = _ops("bernoulli_.float", "bernoulli.p", "rand_like", "randn_like",
               "native_dropout", "dropout")


class _Emitter:
    def __init__(self, traced, roles, params, inputs, names):
        self.traced = traced
        # Each node's position in the graph, once an in-place op asks.
        self.order: Optional[Dict[object, int]] = None
        self.graph = traced.graph
        self.roles = roles
        # The placeholders of the parameters that train.
        self.trained = {node for node, role in zip(
            [n for n in traced.graph.nodes if n.op == "placeholder"], roles)
            if role[0] == "param"}
        self.params, self.inputs, self.names = params, inputs, names
        self.constants: Dict[object, _Tensor] = {}
        # torch.export records the submodule of each op: the layer follows
        # it. make_fx (1.13) does not: the layer of the last parameter read.
        self.module_stacks = any(n.meta.get("nn_module_stack")
                                 for n in traced.graph.nodes)
        self.lines: List[str] = []
        self.values: Dict[object, object] = {}
        self.count = 0
        self.dropouts = 0
        self.layer: Optional[str] = None
        self.handlers = self._handlers()

    # --- emission ----------------------------------------------------------
    def fresh(self) -> str:
        self.count += 1
        return "%%v%d" % self.count

    def op(self, name: str, operands: Sequence[_Tensor], shape,
           attrs: Sequence[str] = (), element: str = "f32") -> _Tensor:
        attrs = list(attrs)
        if any(0 in v.shape for v in operands):
            # (torch.cat leaves empty parts out; nothing else reads one.)
            raise UnsupportedError(
                "strata.import_torch: an empty tensor (shape %s) read by "
                "strata.%s: Strata's tensors have no empty dimension" % (
                    [v.shape for v in operands if 0 in v.shape][0], name))
        if self.layer is not None:
            attrs.append('strata.layer = "%s"' % self.layer)
        ssa = self.fresh()
        self.lines.append("  %s = strata.%s %s%s : (%s) -> %s" % (
            ssa, name, ", ".join(v.ssa for v in operands),
            " {%s}" % ", ".join(attrs) if attrs else "",
            ", ".join(_tensor_type(v.shape, v.element) for v in operands),
            _tensor_type(shape, element)))
        return _Tensor(ssa, tuple(shape), element)

    def constant(self, value: torch.Tensor) -> _Tensor:
        if value.requires_grad:
            # A trainable tensor the capture did not see as a parameter
            # (nn.LSTM's flat weights): as a constant it would not train.
            raise UnsupportedError(
                "strata.import_torch: a tensor that requires grad is read "
                "outside the module's parameters (as nn.LSTM's flat weights "
                "are); it would not train, so it is not imported")
        if value.dtype in _INT_TYPES or value.dtype == torch.bool:
            wide = value.numpy().astype(np.int64)
            if wide.size and (wide.min() < -2**31 or wide.max() >= 2**31):
                raise UnsupportedError("strata.import_torch: an integer "
                                       "constant outside the int32 range")
            array, element = wide.astype(np.int32), "i32"
        elif value.is_floating_point():
            array, element = value.numpy().astype(np.float32), "f32"
        else:
            raise UnsupportedError("a constant of type %s" % value.dtype)
        ssa = self.fresh()
        type_ = _tensor_type(array.shape, element)
        if array.size and (array == array.flat[0]).all():
            literal = repr(array.flat[0].item()) if element == "i32" else \
                "%.9e" % array.flat[0]
        else:
            literal = '"0x%s"' % array.astype(array.dtype.newbyteorder("<")) \
                .tobytes().hex().upper()
        self.lines.append("  %s = arith.constant dense<%s> : %s"
                          % (ssa, literal, type_))
        return _Tensor(ssa, tuple(array.shape), element)

    def fail(self, node, why: str):
        target = node.target
        name = str(target) if isinstance(target, torch._ops.OpOverload) \
            else getattr(target, "__name__", str(target))
        raise UnsupportedError("strata.import_torch: %s%s: %s" % (
            name, _where(node), why))

    # --- values ------------------------------------------------------------
    def raw(self, node):
        if not isinstance(node, torch.fx.Node):
            return node
        if node not in self.values:
            self.fail(node, "its value is not known to the importer")
        return self.values[node]

    def tensor(self, node, user=None) -> _Tensor:
        """The SSA value of `node`, materialising parameters and constants."""
        v = self.raw(node)
        if isinstance(v, _Param):
            if not self.module_stacks:
                layer = _LAYER.match(v.name)
                self.layer = layer.group(1) if layer else None
            v = self.op_get_param(v)
            self.values[node] = v
        elif isinstance(v, _Const):
            # Stays a _Const for folding; emitted once.
            if node not in self.constants:
                self.constants[node] = self.constant(v.value)
            v = self.constants[node]
        elif isinstance(v, (_View, _Transposed)):
            if isinstance(v, _View):
                v = self.op("reshape", [v.base], v.shape,
                            element=v.base.element)
            else:
                source = self.tensor(v.source, user or node)
                v = self.op_transpose(source, _swap_last(len(source.shape)))
            if isinstance(node, torch.fx.Node):
                self.values[node] = v
        if isinstance(v, _Tensor):
            return v
        if isinstance(v, _Unavailable):
            self.fail(user or node, v.why)
        what = {_Masked: "masked attention scores are only read by a softmax",
                _LogSoftmax: "log_softmax is imported only as part of "
                             "cross-entropy (followed by nll_loss)",
                _DropMask: "a dropout mask is only read by a product with "
                           "the values it drops"}.get(type(v))
        self.fail(user or node, what or "reads a value it cannot use")

    def op_get_param(self, p: _Param) -> _Tensor:
        ssa = self.fresh()
        attrs = ' {strata.layer = "%s"}' % self.layer if self.layer else ""
        self.lines.append("  %s = strata.get_param %s%s : %s" % (
            ssa, _symbol(p.name), attrs, _tensor_type(p.shape, "f32")))
        return _Tensor(ssa, tuple(p.shape))

    def shape(self, node) -> tuple:
        meta = node.meta.get("val", node.meta.get("tensor_meta"))
        if meta is None:
            self.fail(node, "PyTorch recorded no shape for it")
        return tuple(int(d) for d in meta.shape)

    # --- the program -------------------------------------------------------
    def emit(self) -> ImportedProgram:
        placeholders = [n for n in self.graph.nodes if n.op == "placeholder"]
        decls, args, inputs, used = [], [], [], []
        for node, (role, what) in zip(placeholders, self.roles):
            if role == "param":
                p = self.params[what]
                if p.dtype != torch.float32:
                    self.fail(node, "parameter '%s' is %s; only float32 "
                              "parameters are imported" % (what, p.dtype))
                if what not in used:  # a tied weight is read twice
                    decls.append("strata.param %s : %s init <zeros>" % (
                        _symbol(what), _tensor_type(p.shape, "f32")))
                    used.append(what)
                self.values[node] = _Param(what, tuple(p.shape))
            elif role == "const":
                self.values[node] = _Const(what)
            else:
                tensor, name = self.inputs[what], self.names[what]
                if tensor.dtype in _INT_TYPES:
                    element, dtype = "i32", np.int32
                elif tensor.dtype == torch.float32:
                    element, dtype = "f32", np.float32
                else:
                    self.fail(node, "input '%s' is %s" % (name, tensor.dtype))
                ssa = "%%arg%d" % what
                type_ = _tensor_type(tensor.shape, element)
                args.append('%s: %s {strata.name = "%s"}' % (ssa, type_, name))
                inputs.append((name, np.dtype(dtype)))
                self.values[node] = _Tensor(ssa, tuple(tensor.shape), element)
        result = None
        for node in self.graph.nodes:
            if node.op == "get_attr":
                self.values[node] = _Const(getattr(self.traced, node.target))
            elif node.op == "call_function":
                self.call(node)
            elif node.op == "output":
                out = node.args[0]
                out = out[0] if isinstance(out, (list, tuple)) else out
                self.layer = None
                result = self.tensor(out)
        if result is None or result.shape != ():
            raise UnsupportedError("strata.import_torch: the loss must be a "
                                   "scalar")
        body = "\n".join(self.lines)
        text = "\n".join(decls) + "\n\nfunc.func @train_step(%s) -> " \
            "tensor<f32> {\n%s\n  return %s : tensor<f32>\n}\n" % (
                ", ".join(args), body, result.ssa)
        weights = {n: self.params[n].numpy().astype(np.float32)
                   for n in used}
        return ImportedProgram(text, weights, inputs)

    def call(self, node):
        t = node.target
        if self.module_stacks:
            self.layer = None
            for path, _ in (node.meta.get("nn_module_stack") or {}).values():
                path = path[len("module."):] if path.startswith("module.") \
                    else path
                match = _LAYER.match(path + ".")
                if match:
                    self.layer = match.group(1)
        if t is operator.getitem:
            source, index = node.args
            packed = self.raw(source)
            if isinstance(packed, _Const):
                self.values[node] = _Const(packed.value[index])
            elif isinstance(packed, _Tuple):
                item = packed.items[index]
                # A result the importer does not compute (a layer norm's
                # statistics) is an error only where it is used.
                self.values[node] = item if item is not None else \
                    _Unavailable("reads a result of %s that the importer "
                                 "does not compute" % source.target)
            else:
                self.fail(node, "reads an item of a value that is not a tuple")
            return
        if t in _CHECKS:
            self.values[node] = None
            return
        operands = [a for a in node.all_input_nodes]
        if t in _SHAPE_ONLY:
            # Reads only the shapes and types of its tensor operands.
            self.values[node] = _Const(self.fold(node, shapes_only=True))
            return
        if t in _STOP_GRADIENT and self.trained_behind(node):
            self.fail(node, "stops the gradient of a trained parameter "
                      "(detach(), .data), which the imported step cannot "
                      "express: Strata's autodiff would differentiate "
                      "through it")
        if t not in _RANDOM and all(
                isinstance(self.values.get(a), _Const) for a in operands):
            # (A random op would be drawn once, here, and reused every step.)
            if isinstance(t, torch._ops.OpOverload) and \
                    torch.Tag.nondeterministic_seeded in getattr(t, "tags", ()):
                self.fail(node, "draws random numbers from constants alone, "
                          "which the importer would draw once at import time "
                          "and reuse every step (dropout is supported)")
            self.values[node] = _Const(self.fold(node))
            return
        handler = self.handlers.get(t)
        if handler is None:
            self.fail(node, "is not supported by the importer yet")
        self.values[node] = handler(node, *node.args, **node.kwargs)

    def trained_behind(self, node) -> bool:
        """Whether a trained parameter's value reaches `node`."""
        stack, seen = list(node.all_input_nodes), set()
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            if n in self.trained:
                return True
            if not (n.op == "call_function" and n.target in _SHAPE_ONLY):
                stack.extend(n.all_input_nodes)
        return False

    def fold(self, node, shapes_only=False):
        def value(a):
            if isinstance(a, torch.fx.Node):
                v = self.values[a]
                if isinstance(v, _Const):
                    return v.value
                meta = a.meta.get("val", a.meta.get("tensor_meta"))
                if shapes_only and meta is not None:
                    return torch.zeros(meta.shape, dtype=meta.dtype)
                self.fail(node, "reads a value that is not known at import "
                          "time")
            if isinstance(a, (list, tuple)):
                return type(a)(value(x) for x in a)
            return a
        with torch.no_grad():
            return node.target(*value(node.args),
                               **{k: value(v) for k, v in node.kwargs.items()})

    # --- handlers ----------------------------------------------------------
    def _handlers(self):
        h = {}

        def on(ops, fn):
            for o in ops:
                h[o] = fn

        on(_IDENTITY + _STOP_GRADIENT, self.identity)
        on(_VIEWS, self.view)
        on(_ops("expand"), self.expand)
        on(_ops("t"), self.t)
        on(_ops("transpose.int"), self.transpose)
        on(_ops("permute"), self.permute)
        on(_ops("split.Tensor", "split_with_sizes"), self.split)
        on(_ops("chunk"), self.chunk)
        on(_ops("slice.Tensor"), self.slice)
        on(_ops("select.int"), self.select)
        on(_ops("index.Tensor"), self.index)
        on(_ops("mm", "addmm", "bmm", "matmul"), self.matmul)
        on(_ops("linear"), self.linear)
        on(_ops("baddbmm"), self.baddbmm)
        on(_ops("add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor"),
           self.binary)
        on(_ops("add.Scalar", "sub.Scalar", "mul.Scalar", "div.Scalar",
                "rsub.Scalar"), self.binary)
        on(_ops("add_.Tensor", "sub_.Tensor", "mul_.Tensor", "div_.Tensor"),
           self.in_place)
        on(_ops("neg"), lambda n, x: self.op(
            "scale", [self.operand(x, n)], self.shape(n), [
                "factor = " + _f64(-1.0)]))
        on(_ops("relu"), self.unary("relu"))
        on(_ops("silu"), self.unary("silu"))
        on(_ops("tanh"), self.unary("tanh"))
        on(_ops("to.dtype", "to.dtype_layout", "_to_copy", "type_as"), self.to)
        on(_ops("cross_entropy_loss"), self.cross_entropy)
        on(_ops("rsqrt"), self.unary("rsqrt"))
        on(_ops("pow.Tensor_Scalar"), self.pow)
        on(_ops("square"), lambda n, x: self.pow(n, x, 2))
        on(_ops("cat"), self.cat)
        on(_ops("stack"), self.stack)
        on(_ops("numpy_T"), lambda n, x: self.permute(
            n, x, list(reversed(range(len(self.shape(x)))))))
        on(_ops("gelu"), self.gelu)
        on(_ops("mean.dim", "sum.dim_IntList"), self.reduce)
        on(_ops("mean.default", "sum.default"),
           lambda n, x, dtype=None: self.reduce(n, x, None, dtype=dtype))
        on(_ops("mse_loss"), self.mse_loss)
        on(_ops("native_layer_norm", "layer_norm"), self.layer_norm)
        on(_ops("rms_norm"), self.rms_norm)
        on(_ops("embedding"), self.embedding)
        on(_ops("_softmax", "softmax.int"), self.softmax)
        on(_ops("masked_fill.Scalar"), self.masked_fill)
        on(_ops("where.self", "where.ScalarOther"), self.where)
        on(_ops("empty_like"), lambda n, x, **kw: _DropMask(1.0, False))
        on(_ops("bernoulli_.float"), self.bernoulli)
        on(_ops("div_.Scalar"), self.scale_mask)
        on(_ops("native_dropout"), self.native_dropout)
        on(_ops("dropout"), lambda n, x, p, train: self.dropout(
            n, self.tensor(x, n), p if train else 0.0))
        on(_ops("_log_softmax"), self.log_softmax)
        on(_ops("nll_loss_forward"), self.nll_loss)
        on(_ops("nll_loss"), lambda n, *a: self.nll_loss(n, *a).items[0])
        on(_ops("scaled_dot_product_attention"), self.sdpa)
        return h

    def identity(self, node, x, *args, **kwargs):
        return self.raw(x)

    def view(self, node, x, *args, **kwargs):
        # Emitted where it is read, from the first tensor of a chain of
        # views (view(view(x)) is one reshape of x).
        v = self.raw(x)
        shape = self.shape(node)
        if isinstance(v, _Transposed) and len(shape) >= 2 and \
                shape[-2:] == self.shape(x)[-2:]:
            # A transposed batch of matrices with other batch dimensions
            # (attention's k^T made 3-D for bmm): the view of the source,
            # transposed, so that the product still reads it transposed.
            source = self.raw(v.source) if isinstance(
                v.source, torch.fx.Node) else v.source
            base = source.base if isinstance(source, _View) else \
                self.tensor(v.source, node)
            inner = tuple(shape[:-2]) + (shape[-1], shape[-2])
            return _Transposed(base if inner == base.shape
                               else _View(base, inner))
        base = v.base if isinstance(v, _View) else self.tensor(x, node)
        return base if shape == base.shape else _View(base, shape)

    def expand(self, node, x, sizes, **kwargs):
        shape = self.shape(node)
        if shape == self.shape(x):
            return self.raw(x)
        v = self.tensor(x, node)
        return self.op("broadcast_to", [v], shape)

    def t(self, node, x):
        # Folded into the product that reads it (Linear's weight).
        return _Transposed(x) if len(self.shape(node)) == 2 else self.raw(x)

    def batched(self, x):
        """(tensor, transposed) when `x` is a view of the tensor that only
        merges its leading (batch) dimensions, or such a view transposed:
        a product can read the tensor itself. None otherwise."""
        v = self.raw(x)
        transposed = isinstance(v, _Transposed)
        if transposed:
            v = self.raw(v.source) if isinstance(v.source, torch.fx.Node) \
                else v.source
        if not isinstance(v, _View):
            return None
        base, shape = v.base, tuple(v.shape)
        if len(base.shape) <= len(shape) or len(shape) < 3 or \
                base.shape[-2:] != shape[-2:] or \
                math.prod(base.shape[:-2]) != math.prod(shape[:-2]):
            return None
        return base, transposed

    def batched_product(self, node, lhs, rhs, shape):
        """A batched product of views that merge the leading dimensions of
        two tensors with the same ones (PyTorch's matmul of [B, H, S, D]
        tensors through 3-D bmm): the product of the tensors themselves,
        viewed as the 3-D result where that is read. None otherwise."""
        a, b = self.batched(lhs), self.batched(rhs)
        if a is None or b is None or a[0].shape[:-2] != b[0].shape[:-2]:
            return None
        (x, tx), (y, ty) = a, b
        m = x.shape[-1] if tx else x.shape[-2]
        n = y.shape[-2] if ty else y.shape[-1]
        attrs = (["transpose_lhs"] if tx else []) + \
            (["transpose_rhs"] if ty else [])
        out = self.op("matmul", [x, y], x.shape[:-2] + (m, n), attrs)
        return _View(out, tuple(shape))

    def permute(self, node, x, dims):
        rank = len(self.shape(x))
        perm = [d % rank for d in dims]
        if perm == list(range(rank)):
            return self.raw(x)
        if rank >= 2 and perm == _swap_last(rank):
            # Folded into a product that reads it (attention's k^T).
            return _Transposed(x)
        return self.op_transpose(self.tensor(x, node), perm)

    def op_transpose(self, v: _Tensor, perm) -> _Tensor:
        shape = tuple(v.shape[p] for p in perm)
        return self.op("transpose", [v], shape, [
            "permutation = array<i64: %s>" % ", ".join(map(str, perm))],
            element=v.element)

    def transpose(self, node, x, a, b):
        rank = len(self.shape(x))
        perm = list(range(rank))
        perm[a % rank], perm[b % rank] = perm[b % rank], perm[a % rank]
        return self.permute(node, x, perm)

    def slice_of(self, node, v, dim, start, size, stride=1):
        """Elements start, start + stride, ... (`size` of them) of `dim`."""
        if size == 1:
            stride = 1
        if start == 0 and size == v.shape[dim] and stride == 1:
            return v
        shape = list(v.shape)
        shape[dim] = size
        if size == 0:
            # An empty part (Phi-3's rotary part of the whole head leaves
            # none to pass through): no op; torch.cat leaves it out.
            return _Tensor("<empty>", tuple(shape), v.element)
        attrs = ["dim = %d : i64" % dim, "start = %d : i64" % start,
                 "size = %d : i64" % size]
        if stride != 1:
            attrs.append("stride = %d : i64" % stride)
        return self.op("slice", [v], shape, attrs, element=v.element)

    def split(self, node, x, sizes, dim=0):
        v = self.tensor(x, node)
        dim %= len(v.shape)
        total = v.shape[dim]
        if isinstance(sizes, int):
            sizes = [min(sizes, total - s) for s in range(0, total, sizes)]
        items, start = [], 0
        for size in sizes:
            items.append(self.slice_of(node, v, dim, start, size))
            start += size
        return _Tuple(items)

    def chunk(self, node, x, chunks, dim=0):
        # torch.chunk: parts of ceil(size / chunks), the last one shorter.
        shape = self.tensor(x, node).shape
        total = shape[dim % len(shape)]
        return self.split(node, x, max(1, -(-total // chunks)), dim)

    def slice(self, node, x, dim=0, start=None, end=None, step=1):
        v = self.tensor(x, node)
        dim %= len(v.shape)
        # (PyTorch's slices have a positive step: `range` counts them.)
        begin, stop, stride = slice(start, end, step).indices(v.shape[dim])
        return self.slice_of(node, v, dim, begin,
                             len(range(begin, stop, stride)), stride)

    def index(self, node, x, indices):
        # x[..., [i, j, ...], ...] with positions known at import time
        # (Falcon's x[..., [-2], :]): runs of evenly spaced positions are
        # (strided) slices, joined along the dimension.
        v = self.tensor(x, node)
        dims = [d for d, t in enumerate(indices) if t is not None]
        known = [self.raw(indices[d]) for d in dims]
        if len(dims) != 1 or not isinstance(known[0], _Const) or \
                known[0].value.dim() != 1 or \
                known[0].value.is_floating_point() or \
                known[0].value.dtype == torch.bool:
            self.fail(node, "indexing other than by a list of positions "
                      "known at import time, in one dimension")
        dim = dims[0]
        extent = v.shape[dim]
        positions = known[0].value.tolist()
        if any(p < -extent or p >= extent for p in positions):
            self.fail(node, "a position outside dimension %d of size %d"
                      % (dim, extent))
        if not positions:
            self.fail(node, "an empty list of positions: Strata's tensors "
                      "have no empty dimension")
        positions = [p % extent for p in positions]
        parts, i = [], 0
        while i < len(positions):
            # The longest run from i with one positive step.
            j = i + 1
            step = positions[j] - positions[i] if j < len(positions) else 1
            while step > 0 and j < len(positions) and \
                    positions[j] - positions[j - 1] == step:
                j += 1
            if step <= 0:
                j, step = i + 1, 1
            parts.append(self.slice_of(node, v, dim, positions[i], j - i,
                                       step))
            i = j
        if len(parts) == 1:
            return parts[0]
        return self.op("concat", parts, self.shape(node),
                       ["dim = %d : i64" % dim], element=v.element)

    def select(self, node, x, dim, index):
        v = self.tensor(x, node)
        dim %= len(v.shape)
        part = self.slice_of(node, v, dim, index % v.shape[dim], 1)
        return self.op("reshape", [part], self.shape(node), element=v.element)

    def product(self, node, lhs, rhs, shape):
        attrs, operands = [], []
        for side, x in (("lhs", lhs), ("rhs", rhs)):
            if isinstance(x, _Tensor):
                operands.append(x)
                continue
            v = self.raw(x)
            if isinstance(v, _Transposed):
                attrs.append("transpose_" + side)
                x = v.source
            operands.append(self.tensor(x, node))
        return self.op("matmul", operands, shape, attrs)

    def matmul(self, node, *args, **kwargs):
        if node.target in _ops("addmm"):
            bias, lhs, rhs = args[:3]
            if kwargs.get("beta", 1) != 1 or kwargs.get("alpha", 1) != 1:
                self.fail(node, "beta and alpha other than 1")
        else:
            (lhs, rhs), bias = args[:2], None
        shape = self.shape(node)
        v = self.raw(lhs)
        if node.target in _ops("addmm", "mm") and isinstance(v, _View) and \
                len(v.shape) == 2 and len(v.base.shape) > 2 and \
                v.base.shape[-1] == v.shape[1]:
            # A Linear on [..., K] (x.view(-1, K) @ W + b): the product on
            # [..., K] itself, viewed as the 2-D result where that is read,
            # so the bias and an activation after it can fuse with the GEMM.
            out = self.product(node, v.base, rhs,
                               v.base.shape[:-1] + shape[-1:])
            return _View(self.bias_add(node, out, bias), shape)
        if bias is None:
            batched = self.batched_product(node, lhs, rhs, shape)
            if batched is not None:
                return batched
        out = self.product(node, lhs, rhs, shape)
        return self.bias_add(node, out, bias)

    def baddbmm(self, node, input, batch1, batch2, beta=1, alpha=1):
        # beta * input + alpha * (batch1 @ batch2) (Bloom's ALiBi scores);
        # with beta = 0 the input is not read, as in PyTorch.
        shape = self.shape(node)
        out = self.product(node, batch1, batch2, shape)
        if alpha != 1:
            out = self.op("scale", [out], shape, ["factor = " + _f64(alpha)])
        if beta == 0:
            return out
        c = self.operand(input, node)
        if beta != 1:
            c = self.op("scale", [c], c.shape, ["factor = " + _f64(beta)])
        return self.op("add", [out, c], shape)

    def bias_add(self, node, out, bias):
        if bias is None:
            return out
        c = self.tensor(bias, node)
        if c.shape != out.shape[-1:]:
            return self.op("add", [out, c], out.shape)
        return self.op("bias_add", [out, c], out.shape)

    def linear(self, node, x, weight, bias=None):
        w = self.tensor(weight, node)
        a = self.tensor(x, node)
        out = self.op("matmul", [a, w], self.shape(node), ["transpose_rhs"])
        return self.bias_add(node, out, bias)

    def in_place(self, node, target, other, alpha=1):
        # a += b (and -=, *=, /=; Falcon's mlp_output += attention_output):
        # the arithmetic itself, where nothing can see the old tensor
        # change. (The capture's later reads of the tensor are of this op's
        # result.) Refused: a mutated input or parameter, a view (whose
        # base would change too), a tensor with views of it (which would
        # change with it), or one read again after the update.
        if self.order is None:
            self.order = {n: i for i, n in enumerate(self.graph.nodes)}
        if not isinstance(target, torch.fx.Node) or \
                target.op != "call_function" or _is_view(target) or \
                any(self.order[u] > self.order[node] or _is_view(u)
                    for u in target.users if u is not node):
            self.fail(node, "an in-place update of an input, a parameter, "
                      "a view or a tensor with views, or of a tensor read "
                      "again after it")
        kind = node.target.overloadpacket.__name__.rstrip("_")
        return self.binary(node, target, other, alpha, kind=kind)

    def binary(self, node, lhs, rhs, alpha=1, kind=None):
        kind = kind or node.target.overloadpacket.__name__
        shape = self.shape(node)
        if kind == "rsub":  # rhs - alpha * lhs
            lhs, rhs, kind = rhs, lhs, "sub"
        if not isinstance(rhs, torch.fx.Node) and kind in ("mul", "div"):
            if kind == "div" and rhs == 0:
                self.fail(node, "a division by the constant 0")
            factor = rhs if kind == "mul" else 1.0 / rhs
            return self.op("scale", [self.operand(lhs, node)], shape,
                           ["factor = " + _f64(factor)])
        if kind == "mul":
            left, right = self.raw(lhs), self.raw(rhs)
            if isinstance(right, _DropMask):
                lhs, rhs, left = rhs, lhs, right
            if isinstance(left, _DropMask):
                if not left.scaled:
                    self.fail(node, "a dropout mask that is not rescaled by "
                              "1 / (1 - p)")
                # PyTorch draws with keep = 1 - p: the p the user wrote.
                return self.dropout(node, self.tensor(rhs, node),
                                    float("%.15g" % (1 - left.keep)))
        if kind == "add" and alpha == 1:
            # scores + mask, the mask -inf above the diagonal and 0 elsewhere:
            # the causal softmax's input.
            for scores, mask in ((lhs, rhs), (rhs, lhs)):
                m = self.raw(mask) if isinstance(mask, torch.fx.Node) \
                    else None
                if isinstance(m, _Const) and m.value.is_floating_point() \
                        and bool(torch.isinf(m.value).any()):
                    if not bool(((m.value == 0) | (m.value <= -1e30))
                                .all()):
                        self.fail(node, "an additive mask other than 0 and "
                                  "-inf")
                    return self.causal(node, scores, m.value == 0)
        a, b = self.operand(lhs, node), self.operand(rhs, node)
        if alpha != 1:
            b = self.op("scale", [b], b.shape, ["factor = " + _f64(alpha)])
        return self.op(kind, [a, b], shape)

    def operand(self, x, node) -> _Tensor:
        """A tensor operand of arithmetic, or a Python number as a rank-0
        constant."""
        if isinstance(x, torch.fx.Node):
            return self.numeric(self.tensor(x, node), node)
        return self.constant(torch.tensor(float(x)))

    def numeric(self, t: _Tensor, node) -> _Tensor:
        """`t`, which arithmetic reads: floating point."""
        if t.element.startswith("i"):
            self.fail(node, "arithmetic on an integer tensor, which "
                      "Strata's ops do not compute (the step's integer "
                      "inputs are indices: labels, token ids); shift or "
                      "scale them in the data pipeline")
        return t

    def unary(self, name):
        def handler(node, x, *args, **kwargs):
            return self.op(name, [self.numeric(self.tensor(x, node), node)],
                           self.shape(node))
        return handler

    def to(self, node, x, *args, **kwargs):
        v = self.raw(x)
        meta = node.meta.get("val", node.meta.get("tensor_meta"))
        src = x.meta.get("val", x.meta.get("tensor_meta"))
        same = meta is not None and src is not None and (
            meta.dtype == src.dtype or
            (meta.dtype in _INT_TYPES and src.dtype in _INT_TYPES))
        if not same:
            self.fail(node, "a conversion to %s (mixed precision is not "
                      "imported yet)" % (meta.dtype if meta is not None
                                         else "another type"))
        return v

    def cross_entropy(self, node, logits, target, weight=None, reduction=1,
                      ignore_index=-100, label_smoothing=0.0):
        if label_smoothing:
            self.fail(node, "cross-entropy with label smoothing")
        return self.nll_loss(node, None, target, weight, reduction,
                             ignore_index, logits=self.tensor(logits, node)
                             ).items[0]

    def pow(self, node, x, exponent):
        if exponent not in (1, 2, 3):
            self.fail(node, "a power other than 1, 2 or 3 (got %r)"
                      % (exponent,))
        v = self.tensor(x, node)
        out = v
        for _ in range(int(exponent) - 1):
            out = self.op("mul", [out, v], v.shape)
        return out

    def cat(self, node, tensors, dim=0):
        values = [self.tensor(t, node) for t in tensors]
        values = [v for v in values if all(values) and 0 not in v.shape]
        dim %= len(values[0].shape)
        if len(values) == 1:
            return values[0]
        return self.op("concat", values, self.shape(node),
                       ["dim = %d : i64" % dim], element=values[0].element)

    def stack(self, node, tensors, dim=0):
        # torch.stack: each input with a unit dimension at `dim`, joined
        # along it.
        values = [self.tensor(t, node) for t in tensors]
        dim %= len(values[0].shape) + 1
        shape = list(values[0].shape)
        shape.insert(dim, 1)
        units = [self.op("reshape", [v], shape, element=v.element)
                 for v in values]
        if len(units) == 1:
            return units[0]
        return self.op("concat", units, self.shape(node),
                       ["dim = %d : i64" % dim], element=units[0].element)

    def gelu(self, node, x, approximate="none"):
        kind = {"none": "erf", "tanh": "tanh"}[approximate]
        return self.op("gelu", [self.tensor(x, node)], self.shape(node),
                       ["approximate = #strata.gelu<%s>" % kind])

    def reduce(self, node, x, dims, keepdim=False, dtype=None):
        v = self.tensor(x, node)
        rank = len(v.shape)
        dims = sorted({d % rank for d in dims}) if dims else list(range(rank))
        if not dims:  # a scalar's own mean or sum
            return v
        name = "reduce_mean" if node.target.overloadpacket is _aten.mean \
            else "reduce_sum"
        attrs = ["dims = array<i64: %s>" % ", ".join(map(str, dims))]
        if keepdim:
            attrs.append("keep_dims")
        return self.op(name, [v], self.shape(node), attrs)

    def mse_loss(self, node, x, target, reduction=1):
        """(x - target)^2, its mean (the default) or sum over every element,
        or each element's (reduction 'none')."""
        a, b = self.operand(x, node), self.operand(target, node)
        if a.shape != b.shape:
            self.fail(node, "a mean-squared error of shapes %s and %s (PyTorch "
                      "broadcasts them with a warning; give the target the "
                      "input's shape)" % (list(a.shape), list(b.shape)))
        d = self.op("sub", [a, b], a.shape)
        sq = self.op("mul", [d, d], a.shape)
        if reduction == 0 or not a.shape:
            return sq
        dims = ", ".join(map(str, range(len(a.shape))))
        return self.op("reduce_mean" if reduction == 1 else "reduce_sum", [sq],
                       (), ["dims = array<i64: %s>" % dims])

    def layer_norm(self, node, x, normalized, weight=None, bias=None,
                   eps=1e-5, *rest):
        v = self.tensor(x, node)
        if len(normalized) != 1:
            self.fail(node, "normalisation over more than the last dimension")
        size = normalized[0]
        gamma = self.tensor(weight, node) if weight is not None else \
            self.constant(torch.ones(size))
        beta = self.tensor(bias, node) if bias is not None else \
            self.constant(torch.zeros(size))
        out = self.op("layer_norm", [v, gamma, beta], v.shape,
                      ["epsilon = " + _f64(eps)])
        if node.target.overloadpacket is _aten.native_layer_norm:
            return _Tuple([out, None, None])
        return out

    def rms_norm(self, node, x, normalized, weight=None, eps=None):
        # torch.nn.RMSNorm / F.rms_norm (aten.rms_norm, which torch.export
        # keeps whole); a written-out RMSNorm (LLaMA's) becomes the same op
        # through strata-rms-norm-recognition.
        v = self.tensor(x, node)
        if len(normalized) != 1:
            self.fail(node, "normalisation over more than the last dimension")
        gamma = self.tensor(weight, node) if weight is not None else \
            self.constant(torch.ones(normalized[0]))
        if eps is None:  # PyTorch's default: the input type's epsilon
            meta = x.meta.get("val", x.meta.get("tensor_meta"))
            eps = torch.finfo(meta.dtype).eps
        return self.op("rms_norm", [v, gamma], v.shape,
                       ["epsilon = " + _f64(eps)])

    def embedding(self, node, table, ids, padding_idx=-1,
                  scale_grad_by_freq=False, sparse=False):
        # (sparse changes how PyTorch stores the gradient, not its values.)
        if scale_grad_by_freq:
            self.fail(node, "an embedding whose gradient is scaled by the "
                      "frequency of the ids (scale_grad_by_freq)")
        w = self.tensor(table, node)
        i = self.tensor(ids, node)
        if i.element != "i32":
            self.fail(node, "indices that are not integers")
        # The padding row is read, but gets no gradient (F.embedding hands
        # aten a non-negative index, -1 for none).
        attrs = ["padding_idx = %d : i64" % padding_idx] \
            if padding_idx >= 0 else []
        return self.op("embedding", [w, i], self.shape(node), attrs)

    def softmax(self, node, x, dim, *args):
        v = self.raw(x)
        causal = isinstance(v, _Masked)
        v = v.scores if causal else self.tensor(x, node)
        if dim % len(v.shape) != len(v.shape) - 1:
            self.fail(node, "a softmax over a dimension other than the last")
        return self.op("softmax", [v], v.shape, ["causal"] if causal else [])

    def causal(self, node, scores, keep):
        """`scores` where `keep` (import-time booleans) holds, -inf elsewhere:
        the causal form when `keep` is the lower triangle."""
        v = self.tensor(scores, node)
        if len(v.shape) < 2 or v.shape[-1] != v.shape[-2]:
            self.fail(node, "a mask on scores that are not square")
        n = v.shape[-1]
        tril = torch.ones(n, n).tril().bool()
        try:
            full = torch.broadcast_to(keep, v.shape)
        except RuntimeError:
            self.fail(node, "a mask that does not broadcast to the scores")
        if not bool((full == tril).all()):
            self.fail(node, "a mask other than the causal one (the lower "
                      "triangle)")
        return _Masked(v)

    def masked_fill(self, node, x, mask, value):
        m = self.raw(mask)
        if not isinstance(m, _Const) or not (
                isinstance(value, float) and value <= -1e30):
            self.fail(node, "only the causal mask with -inf is imported")
        return self.causal(node, x, ~m.value.bool())

    def where(self, node, cond, x, other):
        c = self.raw(cond)
        o = self.raw(other) if isinstance(other, torch.fx.Node) else \
            _Const(torch.tensor(other))
        if not isinstance(c, _Const) or not isinstance(o, _Const) or \
                not bool((o.value <= -1e30).all()):
            self.fail(node, "only torch.where(causal mask, scores, -inf) is "
                      "imported")
        return self.causal(node, x, c.value.bool())

    def bernoulli(self, node, x, keep=0.5, **kwargs):
        # (keep: bernoulli_'s p, 0.5 when the call leaves it out, as
        # nn.Dropout() at its default p = 0.5 does under make_fx.)
        if not isinstance(self.raw(x), _DropMask):
            self.fail(node, "random draws other than a dropout mask")
        return _DropMask(float(keep), False)

    def scale_mask(self, node, x, divisor):
        m = self.raw(x)
        if not isinstance(m, _DropMask) or m.scaled or \
                abs(divisor - m.keep) > 1e-12:
            self.fail(node, "an in-place division other than dropout's")
        return _DropMask(m.keep, True)

    def dropout(self, node, v: _Tensor, prob: float):
        if prob == 0:
            return v
        if not 0 < prob < 1:
            self.fail(node, "a dropout probability of %r" % prob)
        self.dropouts += 1
        return self.op("dropout", [v], v.shape, [
            "key = %d : i64" % self.dropouts, "prob = " + _f64(prob)])

    def native_dropout(self, node, x, p, train=True):
        out = self.dropout(node, self.tensor(x, node), p if train else 0.0)
        return _Tuple([out, None])

    def log_softmax(self, node, x, dim, *args):
        v = self.tensor(x, node)
        if dim % len(v.shape) != len(v.shape) - 1:
            self.fail(node, "log-softmax is imported only as part of "
                      "cross-entropy over the last dimension of the logits")
        return _LogSoftmax(v)

    def nll_loss(self, node, source, target, weight=None, reduction=1,
                 ignore_index=-100, logits=None):
        if logits is None:
            log_probs = self.raw(source)
            if not isinstance(log_probs, _LogSoftmax):
                self.fail(node, "nll_loss is imported only after log_softmax "
                          "(as cross_entropy)")
            logits = log_probs.logits
        if weight is not None or reduction != 1:
            self.fail(node, "only the unweighted mean is imported")
        # Labels outside the classes are errors when the step runs; a class
        # to skip would change the mean, which Strata's loss does not do.
        if 0 <= ignore_index < logits.shape[-1]:
            self.fail(node, "ignore_index=%d, one of the %d classes (a loss "
                      "that skips the labels of a class)"
                      % (ignore_index, logits.shape[-1]))
        labels = self.tensor(target, node)
        if labels.shape != logits.shape[:-1]:
            self.fail(node, "labels of shape %s for logits of shape %s"
                      % (labels.shape, logits.shape))
        saved, self.layer = self.layer, None
        loss = self.op("cross_entropy", [logits, labels], ())
        self.layer = saved
        return _Tuple([loss, None])

    def repeat_heads(self, x, repeat):
        """Each head of `x` [..., Hkv, S, D] `repeat` times, in order:
        [..., Hkv, 1, S, D], broadcast to [..., Hkv, R, S, D], then [...,
        Hkv R, S, D]."""
        lead, heads, rest = x.shape[:-3], x.shape[-3], x.shape[-2:]
        x = self.op("reshape", [x], lead + (heads, 1) + rest,
                    element=x.element)
        x = self.op("broadcast_to", [x], lead + (heads, repeat) + rest,
                    element=x.element)
        return self.op("reshape", [x], lead + (heads * repeat,) + rest,
                       element=x.element)

    def sdpa(self, node, q, k, v, attn_mask=None, dropout_p=0.0,
             is_causal=False, scale=None, enable_gqa=False, **kwargs):
        if dropout_p != 0:
            self.fail(node, "scaled_dot_product_attention with dropout")
        qt, kt, vt = (self.tensor(a, node) for a in (q, k, v))
        if enable_gqa:
            hq, hk, hv = (x.shape[-3] if len(x.shape) >= 3 else 1
                          for x in (qt, kt, vt))
            if hk != hv or hq % hk:
                self.fail(node, "grouped-query attention with %d query "
                          "heads, %d key heads and %d value heads (the key "
                          "and value heads must be as many and divide the "
                          "query heads)" % (hq, hk, hv))
            if hk != hq:
                # PyTorch repeats each key and value head for the query
                # heads that read it (query head h reads key head h // (hq
                # / hk)): written as Hugging Face's repeat_kv (reshape,
                # broadcast_to, reshape), which fused attention reads
                # unrepeated.
                kt, vt = (self.repeat_heads(x, hq // hk) for x in (kt, vt))
        if attn_mask is not None:
            mask = self.raw(attn_mask)
            if not isinstance(mask, _Const):
                self.fail(node, "an attention mask computed from the data "
                          "(only the causal mask is imported)")
            keep = mask.value if mask.value.dtype == torch.bool else \
                mask.value == 0
            n = qt.shape[-2]
            if keep.shape[-2:] != (n, n) or not bool(
                    (torch.broadcast_to(keep, keep.shape[:-2] + (n, n)) ==
                     torch.ones(n, n).tril().bool()).all()):
                self.fail(node, "an attention mask other than the causal one")
            is_causal = True
        scores_shape = qt.shape[:-1] + (kt.shape[-2],)
        s = self.op("matmul", [qt, kt], scores_shape, ["transpose_rhs"])
        factor = scale if scale is not None else 1 / math.sqrt(qt.shape[-1])
        s = self.op("scale", [s], scores_shape, ["factor = " + _f64(factor)])
        p = self.op("softmax", [s], scores_shape,
                    ["causal"] if is_causal else [])
        return self.op("matmul", [p, vt], self.shape(node))


def _swap_last(rank: int) -> List[int]:
    """The permutation that swaps the last two of `rank` dimensions."""
    return list(range(rank - 2)) + [rank - 1, rank - 2]


# --- the command ---------------------------------------------------------

_INPUT_DTYPES = {"int64": torch.int64, "int32": torch.int32,
                 "float32": torch.float32}


def _load_attr(spec: str, what: str):
    """`MODULE:NAME` or `path/to/file.py:NAME` -> the object."""
    import importlib
    import importlib.util
    import os
    import sys
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise SystemExit("strata-import-torch: %s '%s' is not MODULE:NAME"
                         % (what, spec))
    try:
        if module_name.endswith(".py") or os.sep in module_name:
            path = os.path.abspath(module_name)
            loader = importlib.util.spec_from_file_location(
                os.path.splitext(os.path.basename(path))[0], path)
            if loader is None or not os.path.exists(path):
                raise SystemExit("strata-import-torch: no such file: %s"
                                 % module_name)
            sys.path.insert(0, os.path.dirname(path))
            module = importlib.util.module_from_spec(loader)
            loader.loader.exec_module(module)
        else:
            sys.path.insert(0, os.getcwd())
            module = importlib.import_module(module_name)
    except SystemExit:
        raise
    except Exception as e:  # noqa: BLE001 - the user's code, reported
        # (ImportError, or whatever the module raises as it loads: a
        # SyntaxError, a NameError.)
        raise SystemExit("strata-import-torch: cannot import %s: %s: %s"
                         % (module_name, type(e).__name__, e))
    if not hasattr(module, attr):
        raise SystemExit("strata-import-torch: %s has no '%s'"
                         % (module_name, attr))
    return getattr(module, attr)


def _parse_input(spec: str):
    """NAME:SHAPE:DTYPE, e.g. tokens:8x64:int64 -> (name, example tensor)."""
    parts = spec.split(":")
    if len(parts) not in (2, 3) or not parts[0]:
        raise SystemExit("strata-import-torch: --input '%s' is not "
                         "NAME:SHAPE[:DTYPE] (e.g. tokens:8x64:int64)" % spec)
    dtype = parts[2] if len(parts) == 3 else "float32"
    if dtype not in _INPUT_DTYPES:
        raise SystemExit("strata-import-torch: --input '%s': element type "
                         "'%s' is not one of %s"
                         % (spec, dtype, ", ".join(_INPUT_DTYPES)))
    try:
        shape = [int(d) for d in parts[1].split("x")] if parts[1] else []
    except ValueError:
        shape = [-1]
    if any(d < 1 for d in shape):
        raise SystemExit("strata-import-torch: --input '%s': the shape must "
                         "be sizes joined by 'x' (e.g. 8x64)" % spec)
    # (An example input is allocated: one past memory is said so.)
    try:
        return parts[0], torch.zeros(shape, dtype=_INPUT_DTYPES[dtype])
    except (RuntimeError, MemoryError) as e:
        raise SystemExit("strata-import-torch: --input '%s': cannot allocate "
                         "the example input: %s" % (spec, e))


def main(argv=None) -> int:
    """strata-import-torch MODULE:FACTORY --input NAME:SHAPE:DTYPE ...
    [--loss MODULE:FUNCTION] -o program.mlir [--weights init.safetensors]"""
    import argparse
    import sys
    parser = argparse.ArgumentParser(
        prog="strata-import-torch",
        description="Import a PyTorch model as a Strata training program "
        "and its initial weights. FACTORY() returns the nn.Module; the "
        "inputs are the step's arguments in order (with --loss, the last "
        "one is the loss's target).")
    parser.add_argument("factory", metavar="MODULE:FACTORY",
                        help="a module or .py file and a function of it "
                        "that returns the model")
    parser.add_argument("--input", action="append", default=[],
                        metavar="NAME:SHAPE:DTYPE", required=True,
                        help="a step input, e.g. tokens:8x64:int64 "
                        "(DTYPE: int64, int32, float32; default float32)")
    parser.add_argument("--loss", metavar="MODULE:FUNCTION",
                        help="loss(output, target); without it the model's "
                        "forward returns the loss")
    parser.add_argument("-o", "--output", required=True,
                        metavar="program.mlir")
    parser.add_argument("--weights", metavar="init.safetensors",
                        help="write the model's weights (for strata-run "
                        "--init)")
    args = parser.parse_args(argv)
    import os
    # The outputs' places first: nothing is written unless both can be.
    if args.weights and os.path.realpath(args.weights) == \
            os.path.realpath(args.output):
        raise SystemExit("strata-import-torch: -o and --weights name the same "
                         "file, %s" % args.output)
    for flag, path in (("-o", args.output), ("--weights", args.weights)):
        if path is None:
            continue
        where = os.path.dirname(path) or "."
        if os.path.isdir(path) or not os.path.isdir(where):
            raise SystemExit("strata-import-torch: %s %s: %s" % (
                flag, path, "is a directory" if os.path.isdir(path)
                else "no directory '%s'" % where))
    names, tensors = zip(*(_parse_input(s) for s in args.input))
    try:
        _check_input_names(names)
    except ValueError as e:
        raise SystemExit("strata-import-torch: --input: %s" % str(e).replace(
            "strata.import_torch: ", "", 1)) from e
    factory = _load_attr(args.factory, "factory")
    if not callable(factory):
        raise SystemExit("strata-import-torch: %s is a %s, not a function "
                         "returning the model" % (args.factory,
                                                  type(factory).__name__))
    try:
        model = factory()
    except Exception as e:  # noqa: BLE001 - the user's code, reported
        raise SystemExit("strata-import-torch: %s() failed: %s: %s"
                         % (args.factory, type(e).__name__, e)) from e
    if not isinstance(model, torch.nn.Module):
        raise SystemExit("strata-import-torch: %s returned a %s, not an "
                         "nn.Module" % (args.factory, type(model).__name__))
    loss = _load_attr(args.loss, "loss") if args.loss else None
    try:
        program = import_module(model, tensors, loss, input_names=names)
    except (UnsupportedError, CaptureError) as e:
        print(str(e).replace("strata.import_torch", "strata-import-torch", 1),
              file=sys.stderr)
        return 1
    try:
        program.save(args.output)
        if args.weights:
            program.save_weights(args.weights)
    except OSError as e:
        raise SystemExit("strata-import-torch: cannot write %s: %s"
                         % (e.filename or args.output, e.strerror or e))
    if not args.weights:
        print("strata-import-torch: warning: no --weights: the program's "
              "parameters are declared zero, the model's values are only in "
              "the weights file (train with strata-run --init FILE)",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
