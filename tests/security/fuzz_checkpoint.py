#!/usr/bin/env python3
"""atheris fuzzer of the checkpoint reader (carve.checkpoint.read_checkpoint) and of the frontend
that consumes what it returns; the target and its input kinds are in fuzz_targets.py.

Only CarveError may escape: any other exception is a finding, as is a hang (-timeout) or a memory
blow-up (-rss_limit_mb).

  python3 tests/security/fuzz_checkpoint.py -max_total_time=600          # corpus build/security-fuzz/checkpoint
  python3 tests/security/fuzz_checkpoint.py -max_total_time=600 DIR      # corpus DIR (seeds written into it)
  python3 tests/security/fuzz_checkpoint.py crash-<sha1>                  # replay one input

A finding is written as ./crash-<sha1>: move it to tests/security/regression/ckpt-<name>/input (with a
README line saying what it guards), fix the reader, and tests/generator/test_security_regressions.py
replays it from then on.
"""

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent))
import atheris_main  # noqa: E402  (not instrumented: the command line only)

with atheris.instrument_imports(include=["carve", "fuzz_targets"]):
    import fuzz_targets


def main() -> None:
    atheris_main.fuzz(sys.argv, "checkpoint", fuzz_targets.checkpoint_seeds(), fuzz_targets.checkpoint_input)


if __name__ == "__main__":
    main()
