#!/usr/bin/env python3
"""Convert an Ultralytics YOLO26 ``.pt`` checkpoint to ``.safetensors`` without torch.

    python3 tools/pt_to_safetensors.py yolo26n.pt [yolo26n.safetensors] [--fp32]

The file is read with carve's restricted checkpoint reader (nothing in the pickle is
executed) and written with the carve metadata that ``read_checkpoint`` restores:
``carve.yaml``, ``carve.names``, ``carve.stride``, ``carve.task``, ``carve.imgsz``,
``carve.top_type``, ``carve.train_args`` and ``carve.modules`` (every module's class and
its JSON-serialisable attributes).

Tensors keep their source dtype by default (fp16 stays fp16, which is lossless: the reader
widens it to float32 on load); ``--fp32`` stores every floating tensor as float32.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "generator"))

from carve.checkpoint import read_checkpoint, write_safetensors  # noqa: E402
from carve.errors import CarveError  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input", help="checkpoint to convert (.pt)")
    ap.add_argument("output", nargs="?", help="output path (default: input with suffix .safetensors)")
    ap.add_argument("--fp32", action="store_true", help="store floating tensors as float32 instead of their source dtype")
    args = ap.parse_args(argv)
    out = args.output or os.path.splitext(args.input)[0] + ".safetensors"
    if os.path.abspath(out) == os.path.abspath(args.input):
        print(f"{out}: output would overwrite the input", file=sys.stderr)
        return 1
    try:
        ckpt = read_checkpoint(args.input)
        write_safetensors(ckpt, out, keep_dtype=not args.fp32)
    except CarveError as err:
        print(str(err), file=sys.stderr)
        return 1
    n = sum(int(a.size) for a in ckpt.tensors.values())
    print(f"{out}: {len(ckpt.tensors)} tensors, {n:,} values, task={ckpt.task}, {len(ckpt.modules)} modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
