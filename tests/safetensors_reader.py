"""Minimal safetensors reader (float32 tensors only, as subdp writes them) shared by the
MPI invariant checks (tests/mpi/check.py) and the PyTorch parity script
(tests/parity/parity.py)."""
import json, struct

import numpy as np


def read_numpy(path):
    """{name: float32 ndarray of the stored shape} for every tensor in the file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name != "__metadata__":
            a, b = meta["data_offsets"]
            out[name] = np.frombuffer(data[a:b], dtype=np.float32).reshape(meta["shape"])
    return out
