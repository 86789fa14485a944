#!/usr/bin/env python3
"""Edits a subdp checkpoint the way a failing input would, then fixes the manifest's CRC32
so that only the edit itself can be refused.

Usage: edit_checkpoint.py CHECKPOINT_DIR EDIT...
  set NAME FLAT_INDEX VALUE   one element (NAME with "::k" is optimizer state k)
  drop NAME                   remove a tensor
  drop-optimizer              remove every optimizer tensor
  add NAME D0,D1,...          add a zero tensor
  transpose NAME              store a 2-D tensor transposed
  reshape NAME D0,D1,...      store a tensor under another shape (same element count)
"""
import json, os, struct, sys, zlib

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from safetensors_reader import read_numpy  # noqa: E402


def metadata(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)).get("__metadata__")


def write(path, tensors, meta):
    header, offset, blobs = {}, 0, []
    if meta is not None:
        header["__metadata__"] = meta
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def main(ckpt, args):
    files = {k: os.path.join(ckpt, k + ".safetensors") for k in ("model", "optimizer")}
    data = {k: dict(read_numpy(p)) for k, p in files.items()}
    meta = {k: metadata(p) for k, p in files.items()}
    which = lambda name: "optimizer" if "::" in name else "model"
    shape = lambda text: tuple(int(d) for d in text.split(","))
    while args:
        op, args = args[0], args[1:]
        if op == "set":
            name, index, value = args[0], int(args[1]), float(args[2])
            a = data[which(name)][name].copy()
            a.reshape(-1)[index] = np.float32(value)
            data[which(name)][name] = a
            args = args[3:]
        elif op == "drop":
            del data[which(args[0])][args[0]]
            args = args[1:]
        elif op == "drop-optimizer":
            data["optimizer"] = {}
        elif op == "add":
            data[which(args[0])][args[0]] = np.zeros(shape(args[1]), np.float32)
            args = args[2:]
        elif op == "transpose":
            data[which(args[0])][args[0]] = data[which(args[0])][args[0]].T
            args = args[1:]
        elif op == "reshape":
            data[which(args[0])][args[0]] = data[which(args[0])][args[0]].reshape(shape(args[1]))
            args = args[2:]
        else:
            sys.exit(f"edit_checkpoint.py: unknown edit {op!r}")
    manifest_path = os.path.join(ckpt, "manifest.json")
    with open(manifest_path) as f:
        manifest = json.load(f)
    for k, p in files.items():
        write(p, data[k], meta[k])
        with open(p, "rb") as f:
            manifest["files"][k + ".safetensors"] = f"{zlib.crc32(f.read()) & 0xffffffff:08x}"
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=2)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
