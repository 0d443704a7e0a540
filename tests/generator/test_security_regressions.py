"""Replays every generator input the fuzzers found (tests/security/regression/ckpt-*/input and
manifest-*/input) through the same targets (tests/security/fuzz_targets.py): only CarveError may
escape, and no input may take more memory than a checkpoint is worth.

Each folder has a README saying which failure it guards. C entry-point findings (entry-*) are
replayed by ctest security_fuzz_regressions instead.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SECURITY = REPO / "tests" / "security"
INPUTS = sorted(p for p in (SECURITY / "regression").glob("*/input*") if p.parent.name.startswith(("ckpt-", "manifest-")))

_REPLAY = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))   # 2 GiB: the memo bomb wanted ~10
sys.path.insert(0, sys.argv[1])
import fuzz_targets
target = fuzz_targets.checkpoint_input if sys.argv[2] == 'ckpt' else fuzz_targets.manifest_input
target(open(sys.argv[3], 'rb').read())
print('ok')
"""


def test_there_are_regressions():
    assert INPUTS, "tests/security/regression/ has no generator inputs"
    for p in INPUTS:
        assert (p.parent / "README.md").is_file(), f"{p.parent} needs a README saying what it guards"


@pytest.mark.parametrize("path", INPUTS, ids=[p.parent.name for p in INPUTS])
def test_regression_input(path):
    """In a child process under a 2 GiB address-space limit: an escaping exception, a MemoryError or
    a crash fails the test."""
    kind = path.parent.name.split("-")[0]
    r = subprocess.run([sys.executable, "-c", _REPLAY, str(SECURITY), kind, str(path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]
