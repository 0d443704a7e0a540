#!/usr/bin/env python3
"""atheris fuzzer of the manifest loader (carve.manifest.load_manifest, load_architecture);
the target is in fuzz_targets.py.

Only CarveError may escape: any other exception is a finding, as is a hang (-timeout) or a memory
blow-up (-rss_limit_mb).

  python3 tests/security/fuzz_manifest.py -max_total_time=600          # corpus build/security-fuzz/manifest
  python3 tests/security/fuzz_manifest.py -max_total_time=600 DIR      # corpus DIR (seeds written into it)
  python3 tests/security/fuzz_manifest.py crash-<sha1>                  # replay one input

A finding is written as ./crash-<sha1>: move it to tests/security/regression/manifest-<name>/input (with a
README line saying what it guards), fix the reader, and tests/generator/test_security_regressions.py
replays it from then on.
"""

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent))
with atheris.instrument_imports(include=["carve", "fuzz_targets"]):
    import fuzz_targets


def main() -> None:
    argv = list(sys.argv)
    dirs = [Path(a) for a in argv[1:] if not a.startswith("-") and Path(a).is_dir()]
    if not any(not a.startswith("-") for a in argv[1:]):
        dirs = [fuzz_targets.REPO / "build" / "security-fuzz" / "manifest"]
        dirs[0].mkdir(parents=True, exist_ok=True)
        argv.append(str(dirs[0]))
    if dirs:  # a corpus folder: (re)write the seeds into it
        for name, data in fuzz_targets.manifest_seeds().items():
            (dirs[0] / f"seed-{name}").write_bytes(data)
    atheris.Setup(argv, fuzz_targets.manifest_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
