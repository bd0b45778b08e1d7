#!/usr/bin/env python3
"""Writes damaged safetensors files for the loader's tests.

  craft_safetensors.py overflow OUT   a shape whose byte count overflows
  craft_safetensors.py overlap OUT    two entries sharing bytes
  craft_safetensors.py duplicate OUT  one tensor named twice
  craft_safetensors.py nan IN OUT [--tensor NAME]
                                      IN with the first value of its first
                                      F32 tensor (or of NAME) set to NaN
  craft_safetensors.py set IN OUT NAME VALUE
                                      IN with the first element of tensor
                                      NAME (F32 or I64) set to VALUE
  craft_safetensors.py numeric-meta IN OUT
                                      IN with strata.steps_done a JSON number
                                      (the format's metadata are strings)
"""
import json
import struct
import sys


def write(path, header, payload):
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + payload)


mode = sys.argv[1]
if mode == "overflow":
    write(sys.argv[2], {"w": {"dtype": "F32", "shape": [1 << 62, 4],
                              "data_offsets": [0, 16]}}, bytes(16))
elif mode == "overlap":
    write(sys.argv[2], {"a": {"dtype": "F32", "shape": [4],
                              "data_offsets": [0, 16]},
                        "b": {"dtype": "F32", "shape": [4],
                              "data_offsets": [8, 24]}}, bytes(24))
elif mode == "duplicate":
    # json.dumps cannot write a key twice: the header is spelled out.
    entry = '{"dtype": "F32", "shape": [4], "data_offsets": [%d, %d]}'
    text = ('{"w": ' + entry % (0, 16) + ', "w": ' + entry % (16, 32) +
            '}').encode()
    with open(sys.argv[2], "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + bytes(32))
elif mode == "nan":
    data = open(sys.argv[2], "rb").read()
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + size])
    payload = bytearray(data[8 + size:])
    name = sorted(k for k, v in header.items()
                  if k != "__metadata__" and v["dtype"] == "F32")[0]
    if len(sys.argv) > 5 and sys.argv[4] == "--tensor":
        name = sys.argv[5]
    begin = header[name]["data_offsets"][0]
    payload[begin:begin + 4] = struct.pack("<f", float("nan"))
    write(sys.argv[3], header, bytes(payload))
elif mode == "set":
    data = open(sys.argv[2], "rb").read()
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + size])
    payload = bytearray(data[8 + size:])
    entry = header[sys.argv[4]]
    begin = entry["data_offsets"][0]
    if entry["dtype"] == "I64":
        payload[begin:begin + 8] = struct.pack("<q", int(sys.argv[5]))
    else:
        payload[begin:begin + 4] = struct.pack("<f", float(sys.argv[5]))
    write(sys.argv[3], header, bytes(payload))
elif mode == "numeric-meta":
    data = open(sys.argv[2], "rb").read()
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + size])
    header["__metadata__"]["strata.steps_done"] = 3
    write(sys.argv[3], header, data[8 + size:])
else:
    sys.exit("unknown mode " + mode)
