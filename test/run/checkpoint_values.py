#!/usr/bin/env python3
"""Prints scalar tensors of a safetensors checkpoint, one `name value` line
each, for FileCheck (the loss scale and its counters, the step counter).

    checkpoint_values.py ckpt.safetensors NAME [NAME ...]
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_tensors import load  # noqa: E402

tensors = load(sys.argv[1])
for name in sys.argv[2:]:
    if name not in tensors:
        sys.exit("%s: no tensor '%s'" % (sys.argv[1], name))
    dtype, shape, values = tensors[name]
    if len(values) != 1:
        sys.exit("%s: '%s' has shape %s, not a scalar" % (sys.argv[1], name,
                                                         shape))
    value = values[0]
    print("%s %s" % (name, repr(value) if dtype.startswith("F") else value))
