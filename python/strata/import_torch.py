"""Import a PyTorch model and its loss as a Strata training program.

    import strata.import_torch as it
    program = it.import_module(model, (x, y), loss_fn=F.cross_entropy)
    program.save_weights("init.safetensors")
    exe = strata.compile(program.text, strategy="adamw.yaml")
    exe.load("init.safetensors")          # PyTorch's initial weights

The forward of the module and the loss are captured as a graph of ATen ops
with shapes (`make_fx`, PyTorch 1.13 and 2.x), and each op becomes ops of the
strata dialect: parameters named by the module's `state_dict` keys, the batch
as the step's arguments. Autodiff, the optimizer and every strategy then
apply as for generated programs.

This first version covers multi-layer perceptrons: `nn.Linear` (aten.t,
addmm, mm), ReLU and the mean cross-entropy over class indices. Any other op
is an error naming the ATen op (and the Python line, when PyTorch recorded
it), never a wrong program.
"""

import json
import operator
import re
import struct
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Sequence

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
_DTYPES = {torch.float32: ("f32", np.float32), torch.int64: ("i32", np.int32),
           torch.int32: ("i32", np.int32)}


def _symbol(name: str) -> str:
    return "@" + name if _BARE_ID.match(name) else "@" + json.dumps(name)


def _tensor_type(shape, element: str) -> str:
    if len(shape) == 0:
        return "tensor<%s>" % element
    return "tensor<%sx%s>" % ("x".join(str(d) for d in shape), element)


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

    def batch(self, *tensors) -> List[np.ndarray]:
        """PyTorch tensors of the step's inputs as the arrays the executable
        takes (class indices become int32)."""
        return [t.detach().cpu().numpy().astype(dtype)
                for t, (_, dtype) in zip(tensors, self.inputs)]


def _where(node) -> str:
    """" at FILE:LINE (code)" of the model's source that made `node`, when
    PyTorch recorded it; "" otherwise."""
    trace = node.meta.get("stack_trace") if hasattr(node, "meta") else None
    if not trace:
        return ""
    lines = trace.splitlines()
    for i, line in enumerate(lines):
        match = re.match(r'\s*File "([^"]+)", line (\d+)', line)
        if not match:
            continue
        path = match.group(1)
        if path.startswith("<") or "/torch/" in path or \
                path.endswith("import_torch.py"):
            continue
        code = lines[i + 1].strip() if i + 1 < len(lines) else ""
        return " at %s:%s (%s)" % (path, match.group(2), code)
    return ""


def import_module(module: torch.nn.Module, example_inputs: Sequence,
                  loss_fn: Callable, input_names: Sequence[str] = None
                  ) -> ImportedProgram:
    """Captures `loss_fn(module(*example_inputs[:-1]), example_inputs[-1])`
    and emits it as a Strata training step over the module's parameters.
    The last example input is the target of the loss."""
    params = {name: p.detach() for name, p in module.named_parameters()}
    inputs = list(example_inputs)
    names = list(input_names) if input_names else \
        ["input%d" % i for i in range(len(inputs) - 1)] + ["target"]

    def step(params, *batch):
        out = functional_call(module, params, tuple(batch[:-1]))
        return loss_fn(out, batch[-1])

    # Each node keeps the Python stack that made it, for the errors.
    from torch.fx.experimental import proxy_tensor
    tracer = proxy_tensor.PythonKeyTracer
    recorded = tracer.record_stack_traces
    tracer.record_stack_traces = True
    try:
        graph = make_fx(step)(params, *inputs).graph
    finally:
        tracer.record_stack_traces = recorded
    return _Emitter(graph, params, inputs, names).emit()


class _Emitter:
    def __init__(self, graph, params, inputs, names):
        self.graph, self.params, self.inputs, self.names = \
            graph, params, inputs, names
        self.lines: List[str] = []
        self.values: Dict[object, tuple] = {}  # fx node -> (ssa, shape, type)
        self.count = 0

    def fresh(self) -> str:
        self.count += 1
        return "%%v%d" % self.count

    def op(self, text: str, shape, element="f32"):
        ssa = self.fresh()
        self.lines.append("  %s = %s" % (ssa, text))
        return (ssa, tuple(shape), element)

    def fail(self, node, why: str):
        raise UnsupportedError("strata.import_torch: %s%s: %s" % (
            node.target if isinstance(node.target, torch._ops.OpOverload)
            else getattr(node.target, "__name__", str(node.target)),
            _where(node), why))

    def emit(self) -> ImportedProgram:
        param_names = list(self.params)
        placeholders = [n for n in self.graph.nodes if n.op == "placeholder"]
        decls, args, arg_types, inputs = [], [], [], []
        for node, name in zip(placeholders, param_names):
            p = self.params[name]
            if p.dtype != torch.float32:
                self.fail(node, "parameter '%s' is %s; only float32 "
                          "parameters are imported" % (name, p.dtype))
            type_ = _tensor_type(p.shape, "f32")
            decls.append("strata.param %s : %s init <zeros>"
                         % (_symbol(name), type_))
            self.values[node] = ("param", name, tuple(p.shape))
        for i, (node, tensor, name) in enumerate(zip(
                placeholders[len(param_names):], self.inputs, self.names)):
            if tensor.dtype not in _DTYPES:
                self.fail(node, "input '%s' is %s" % (name, tensor.dtype))
            element, dtype = _DTYPES[tensor.dtype]
            ssa = "%%arg%d" % i
            type_ = _tensor_type(tensor.shape, element)
            args.append('%s: %s {strata.name = "%s"}' % (ssa, type_, name))
            arg_types.append(type_)
            inputs.append((name, np.dtype(dtype)))
            self.values[node] = (ssa, tuple(tensor.shape), element)
        result = None
        for node in self.graph.nodes:
            if node.op == "call_function":
                self.call(node)
            elif node.op == "output":
                out = node.args[0]
                out = out[0] if isinstance(out, (list, tuple)) else out
                result = self.value(out)
        if result is None or result[1] != ():
            raise UnsupportedError("strata.import_torch: the loss must be a "
                                   "scalar")
        body = "\n".join(self.lines)
        text = "\n".join(decls) + "\n\nfunc.func @train_step(%s) -> " \
            "tensor<f32> {\n%s\n  return %s : tensor<f32>\n}\n" % (
                ", ".join(args), body, result[0])
        weights = {n: p.numpy().astype(np.float32)
                   for n, p in self.params.items()}
        return ImportedProgram(text, weights, inputs)

    def value(self, node):
        v = self.values.get(node)
        if v is None:
            self.fail(node, "its value cannot be used here")
        if v[0] == "param":
            _, name, shape = v
            v = self.op("strata.get_param %s : %s"
                        % (_symbol(name), _tensor_type(shape, "f32")), shape)
            self.values[node] = v
        if v[0] == "transposed":
            self.fail(node, "a transposed value is only read by a product")
        return v

    def call(self, node):
        t = node.target
        if t in (_aten.detach.default,):
            return
        if t is operator.getitem:
            source, index = node.args
            packed = self.values.get(source)
            if packed is None or packed[0] != "tuple":
                self.fail(node, "reads an item of a value that is not a "
                          "loss result")
            if index == 0:
                self.values[node] = packed[1]
            return
        if t is _aten.t.default:
            (x,) = node.args
            v = self.values.get(x)
            if v is None or len(v[-1] if v[0] == "param" else v[1]) != 2:
                self.fail(node, "transposes something other than a matrix")
            self.values[node] = ("transposed", x)
            return
        if t in (_aten.addmm.default, _aten.mm.default):
            if t is _aten.addmm.default:
                bias, lhs, rhs = node.args[:3]
                if node.kwargs.get("beta", 1) != 1 or \
                        node.kwargs.get("alpha", 1) != 1:
                    self.fail(node, "beta and alpha other than 1")
            else:
                bias, (lhs, rhs) = None, node.args
            a = self.value(lhs)
            transposed = self.values.get(rhs)
            attrs = ""
            if transposed is not None and transposed[0] == "transposed":
                b = self.value(transposed[1])
                attrs = " {transpose_rhs}"
                n = b[1][0]
            else:
                b = self.value(rhs)
                n = b[1][1]
            shape = (a[1][0], n)
            out = self.op("strata.matmul %s, %s%s : (%s, %s) -> %s" % (
                a[0], b[0], attrs, _tensor_type(a[1], "f32"),
                _tensor_type(b[1], "f32"), _tensor_type(shape, "f32")), shape)
            if bias is not None:
                c = self.value(bias)
                if c[1] != (n,):
                    self.fail(node, "a bias of shape %s" % (c[1],))
                out = self.op("strata.bias_add %s, %s : (%s, %s) -> %s" % (
                    out[0], c[0], _tensor_type(shape, "f32"),
                    _tensor_type(c[1], "f32"), _tensor_type(shape, "f32")),
                    shape)
            self.values[node] = out
            return
        if t is _aten.relu.default:
            x = self.value(node.args[0])
            self.values[node] = self.op("strata.relu %s : (%s) -> %s" % (
                x[0], _tensor_type(x[1], "f32"), _tensor_type(x[1], "f32")),
                x[1])
            return
        if t is _aten._log_softmax.default:
            x, dim = node.args[:2]
            v = self.value(x)
            if dim not in (-1, len(v[1]) - 1) or len(v[1]) != 2:
                self.fail(node, "log-softmax is imported only as part of "
                          "cross-entropy over the last dimension of logits "
                          "of shape [batch, classes]")
            self.values[node] = ("logsoftmax", v)
            return
        if t is _aten.nll_loss_forward.default:
            source, target, weight, reduction, ignore = node.args[:5]
            logits = self.values.get(source)
            if logits is None or logits[0] != "logsoftmax":
                self.fail(node, "nll_loss is imported only after "
                          "log_softmax (as cross_entropy)")
            if weight is not None or reduction != 1:
                self.fail(node, "only the unweighted mean is imported")
            logits = logits[1]
            labels = self.value(target)
            loss = self.op("strata.cross_entropy %s, %s : (%s, %s) -> "
                           "tensor<f32>" % (
                               logits[0], labels[0],
                               _tensor_type(logits[1], "f32"),
                               _tensor_type(labels[1], labels[2])), ())
            self.values[node] = ("tuple", loss)
            return
        self.fail(node, "is not supported by the importer yet")
