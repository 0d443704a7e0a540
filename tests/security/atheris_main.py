"""The atheris command line shared by fuzz_checkpoint.py and fuzz_manifest.py.

With no input named, the corpus is build/security-fuzz/<kind>; a corpus folder (given or default) gets the
seeds (re)written into it; a file argument replays that one input.
"""

from pathlib import Path

import atheris


def fuzz(argv: list, kind: str, seeds: dict, target) -> None:
    """Run libFuzzer's loop on ``target`` (one bytes argument) for the fuzzer ``kind``."""
    from fuzz_targets import REPO

    argv = list(argv)
    dirs = [Path(a) for a in argv[1:] if not a.startswith("-") and Path(a).is_dir()]
    if not any(not a.startswith("-") for a in argv[1:]):
        dirs = [REPO / "build" / "security-fuzz" / kind]
        dirs[0].mkdir(parents=True, exist_ok=True)
        argv.append(str(dirs[0]))
    if dirs:  # a corpus folder: (re)write the seeds into it
        for name, data in seeds.items():
            (dirs[0] / f"seed-{name}").write_bytes(data)
    atheris.Setup(argv, target)
    atheris.Fuzz()
