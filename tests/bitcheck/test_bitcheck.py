"""tools/bitcheck.py compare on small synthetic result folders (no packages built, about a second).

    python3 -m pytest -q tests/bitcheck

Each case writes a "before" and an "after" folder in the layout `bitcheck.py run` writes (entries/<key>.json with
the SHA-256 of every dump file, dumps/<key>/*.npy), changes one thing in "after", and checks compare's verdict,
exit status and what it names: identical folders pass; one float one ulp off in one layer, a missing or failed
entry, a changed JSON field, other checkpoint weights, or a thread count that changed the bits all fail, and the
report names the layer and how far apart the values are.
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import bitcheck  # noqa: E402

KEYS = ("yolo26n@64-xnnpack", "yolo26n-seg@64-portable")
DEMO_JSON = ('{"model": "yolo26n", "image": {"width": 810, "height": 1080}, "threads": 2,\n'
             ' "timing_ms": {"init": 1.234, "median": 5.678, "runs": 1},\n "detections": [\n'
             '  {"class_id": 5, "class": "bus", "score": 0.512345, "box": [1.000, 2.000, 300.500, 400.250]}\n ]}\n')


def layers(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {"layer_00.npy": rng.standard_normal((1, 4, 8, 8)).astype(np.float32),
            "layer_01.npy": rng.standard_normal((1, 8, 4, 4)).astype(np.float32),
            "output0.npy": rng.standard_normal((1, 300, 6)).astype(np.float32)}


def write_result(d: Path, arrays: dict | None = None, demo_json: str = DEMO_JSON, keys=KEYS, **fields) -> Path:
    """A result folder as `bitcheck.py run` writes it; fields override entry fields (all entries)."""
    for key in keys:
        dump = d / "dumps" / key
        dump.mkdir(parents=True)
        for name, a in (arrays or layers(0)).items():
            np.save(dump / name, a)
        text = bitcheck.canonical_json(demo_json)
        rec = {"format": bitcheck.FORMAT, "key": key, "status": "ok", "settings": {"threads": 2, "conf": 0.1},
               "checkpoint": {"sha256": "ab" * 32}, "json": text, "json_sha256": bitcheck.sha256_bytes(text.encode()),
               "dumps": bitcheck.hash_dump(dump), "threads_1_vs_n": {"threads": [1, 2], "differ": []}}
        rec.update(fields)
        (d / "entries").mkdir(exist_ok=True)
        (d / "entries" / f"{key}.json").write_text(json.dumps(rec))
    return d


def compare(before: Path, after: Path, capsys) -> tuple:
    rc = bitcheck.main(["compare", str(before), str(after)])
    return rc, capsys.readouterr().out


def row(out: str, key: str) -> str:
    """The summary table's line of one entry, with its detail lines."""
    lines = out.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith(key + " "))
    j = i + 1
    while j < len(lines) and lines[j].startswith(" "):
        j += 1
    return "\n".join(lines[i:j])


def test_hash_dump_is_sha256_of_the_file_bytes(tmp_path):
    d = write_result(tmp_path / "a")
    rec = json.loads((d / "entries" / f"{KEYS[0]}.json").read_text())
    f = d / "dumps" / KEYS[0] / "layer_01.npy"
    assert rec["dumps"]["layer_01.npy"]["sha256"] == hashlib.sha256(f.read_bytes()).hexdigest()
    assert rec["dumps"]["layer_01.npy"]["shape"] == [1, 8, 4, 4]


def test_canonical_json_drops_timing_only():
    a = bitcheck.canonical_json(DEMO_JSON)
    b = bitcheck.canonical_json(DEMO_JSON.replace("5.678", "9.999").replace("1.234", "0.5"))
    assert a == b and "timing_ms" not in a
    assert bitcheck.canonical_json(DEMO_JSON.replace("0.512345", "0.512346")) != a
    with pytest.raises(bitcheck.BitcheckError):
        bitcheck.canonical_json("yolo26n: 1 detection")


def test_identical(tmp_path, capsys):
    rc, out = compare(write_result(tmp_path / "a"), write_result(tmp_path / "b"), capsys)
    assert rc == 0, out
    assert "RESULT: all identical" in out
    assert all(row(out, k).split()[1] == "identical" for k in KEYS)


def test_one_ulp_in_one_layer(tmp_path, capsys):
    arrays = layers(0)
    a = arrays["layer_01.npy"].copy()
    flat = a.reshape(-1)
    flat[7] = np.nextafter(flat[7], np.float32(np.inf))
    arrays["layer_01.npy"] = a
    before = write_result(tmp_path / "a")
    after = write_result(tmp_path / "b", arrays)
    rc, out = compare(before, after, capsys)
    assert rc == 1
    r = row(out, KEYS[0])
    assert "DIFFERENT" in r and "layer_01.npy" in r and "layer_00.npy" not in r and "output0.npy" not in r
    want_abs = abs(float(a.reshape(-1)[7]) - float(layers(0)["layer_01.npy"].reshape(-1)[7]))
    want_rel = want_abs / float(np.abs(layers(0)["layer_01.npy"]).max())
    assert f"max abs {want_abs:.3g}" in r and f"max rel {want_rel:.3g}" in r and "(1 of 128 elements)" in r


def test_missing_entry(tmp_path, capsys):
    rc, out = compare(write_result(tmp_path / "a"), write_result(tmp_path / "b", keys=KEYS[:1]), capsys)
    assert rc == 1
    assert "MISSING" in row(out, KEYS[1]) and "identical" in row(out, KEYS[0])


def test_missing_and_new_dump_file(tmp_path, capsys):
    arrays = layers(0)
    arrays["output1.npy"] = arrays.pop("layer_00.npy")
    rc, out = compare(write_result(tmp_path / "a"), write_result(tmp_path / "b", arrays), capsys)
    assert rc == 1
    r = row(out, KEYS[0])
    assert "layer_00.npy: missing after" in r and "output1.npy: new after" in r


def test_failed_entry(tmp_path, capsys):
    after = write_result(tmp_path / "b", status="error", error="exit code 1: cc ... undefined reference")
    rc, out = compare(write_result(tmp_path / "a"), after, capsys)
    assert rc == 1
    assert "FAILED" in row(out, KEYS[0]) and "undefined reference" in row(out, KEYS[0])


def test_json_field(tmp_path, capsys):
    after = write_result(tmp_path / "b", demo_json=DEMO_JSON.replace("300.500", "300.501"))
    rc, out = compare(write_result(tmp_path / "a"), after, capsys)
    assert rc == 1
    assert "json: /detections[0]/box[2]: 300.5 -> 300.501" in row(out, KEYS[0])


def test_ignore_json_path(tmp_path, capsys):
    """--ignore-json /threads passes an expected change of that path only; any other change still fails."""
    before = write_result(tmp_path / "a")
    after = write_result(tmp_path / "b", demo_json=DEMO_JSON.replace('"threads": 2', '"threads": 1'))
    rc = bitcheck.main(["compare", "--ignore-json", "/threads", str(before), str(after)])
    out = capsys.readouterr().out
    assert rc == 0 and "json (ignored): /threads: 2 -> 1" in row(out, KEYS[0])
    both = write_result(tmp_path / "c", demo_json=DEMO_JSON.replace('"threads": 2', '"threads": 1')
                        .replace("300.500", "300.501"))
    rc = bitcheck.main(["compare", "--ignore-json", "/threads", str(before), str(both)])
    out = capsys.readouterr().out
    assert rc == 1 and "json: /detections[0]/box[2]: 300.5 -> 300.501" in row(out, KEYS[0])
    assert compare(before, after, capsys)[0] == 1  # not ignored unless asked


def test_other_weights(tmp_path, capsys):
    rc, out = compare(write_result(tmp_path / "a"), write_result(tmp_path / "b", checkpoint={"sha256": "cd" * 32}),
                      capsys)
    assert rc == 1 and "checkpoints differ" in row(out, KEYS[0])


def test_threads_disagree(tmp_path, capsys):
    after = write_result(tmp_path / "b", threads_1_vs_n={"threads": [1, 2], "differ": ["layer_00.npy"]})
    rc, out = compare(write_result(tmp_path / "a"), after, capsys)
    assert rc == 1 and "after: threads 1 vs 2 differ in layer_00.npy" in row(out, KEYS[0])


def test_not_a_result_folder(tmp_path, capsys):
    rc = bitcheck.main(["compare", str(tmp_path), str(tmp_path)])
    assert rc == 2 and "no entries/" in capsys.readouterr().err


def test_readme_cc_command(tmp_path):
    (tmp_path / "README.md").write_text("# m\n\n<!-- carve:cc -->\n```sh\ncc -O2 a.c -o a_demo -lm\n```\n\nmore\n")
    assert bitcheck.readme_cc_command(tmp_path) == "cc -O2 a.c -o a_demo -lm"
    (tmp_path / "README.md").write_text("# m\n")
    assert bitcheck.readme_cc_command(tmp_path) is None


def test_cli_lists():
    assert len(bitcheck.VARIANTS) == 25 and len(set(bitcheck.VARIANTS)) == 25
    assert bitcheck.parse_extra("yolo26n@640,yolo26s-seg@96") == [("yolo26n", 640), ("yolo26s-seg", 96)]
    assert bitcheck.parse_extra("none") == []
    with pytest.raises(SystemExit):
        bitcheck.main(["run", "--root", ".", "--out", "x", "--backends", "cuda"])


def test_object_cache_follows_the_runtime(tmp_path):
    """The cc line built source by source with runtime objects from the cache: a second package with the same
    runtime hits the cache; a changed runtime header (included with <...>) or flag misses, and the program sees it."""
    import shutil
    import subprocess
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")

    def package(d: Path, value: int, flag: str = "") -> Path:
        (d / "runtime").mkdir(parents=True)
        (d / "runtime" / "rt.h").write_text(f"#define RT_VALUE {value}\nint rt(void);\n")
        (d / "runtime" / "rt.c").write_text("#include <rt.h>\nint rt(void) { return RT_VALUE; }\n")
        (d / "main.c").write_text('#include <stdio.h>\n#include "rt.h"\nint main(void) { printf("%d\\n", rt()); }\n')
        (d / "README.md").write_text(f"<!-- carve:cc -->\n```sh\ncc -std=c11 -O2{flag} -I. -Iruntime main.c "
                                     "runtime/rt.c -o m_demo -lm\n```\n")
        return d

    cache = bitcheck.ObjectCache(tmp_path / "objects")

    def build(d: Path) -> str:
        bitcheck.build_cc(d, bitcheck.readme_cc_command(d), cache)
        return subprocess.run([str(d / "m_demo")], capture_output=True, text=True, check=True).stdout.strip()

    assert build(package(tmp_path / "a", 1)) == "1" and (cache.hits, cache.misses) == (0, 1)
    assert build(package(tmp_path / "b", 1)) == "1" and (cache.hits, cache.misses) == (1, 1)
    assert build(package(tmp_path / "c", 2)) == "2" and (cache.hits, cache.misses) == (1, 2)
    assert build(package(tmp_path / "d", 2, " -DX=1")) == "2" and (cache.hits, cache.misses) == (1, 3)
    assert bitcheck.split_cc_line("cc -O2 a.c -o a && ./a") is None


def test_checkpoint_digest_ignores_the_zip_root_name(tmp_path):
    """torch.save names the zip's root folder after the file: the same weights saved under two names are one
    checkpoint; a changed byte is another."""
    import zipfile

    def save(path: Path, root: str, data: bytes) -> Path:
        with zipfile.ZipFile(path, "w") as z:
            z.writestr(f"{root}/data.pkl", b"pickle")
            z.writestr(f"{root}/data/0", data)
        return path

    a = save(tmp_path / "a.pt", "a", b"\x00\x01")
    b = save(tmp_path / "b.pt", "b.tmp", b"\x00\x01")
    c = save(tmp_path / "c.pt", "a", b"\x00\x02")
    assert bitcheck.sha256_file(a) != bitcheck.sha256_file(b)
    assert bitcheck.checkpoint_digest(a) == bitcheck.checkpoint_digest(b) != bitcheck.checkpoint_digest(c)


def test_partial(tmp_path, capsys):
    """--partial: a rerun of some entries is compared on those; a missing one is skipped, a differing one fails."""
    before = write_result(tmp_path / "a")
    rc = bitcheck.main(["compare", "--partial", str(before), str(write_result(tmp_path / "b", keys=KEYS[:1]))])
    out = capsys.readouterr().out
    assert rc == 0 and "skipped" in row(out, KEYS[1]) and "identical" in row(out, KEYS[0])
    after = write_result(tmp_path / "c", layers(1), keys=KEYS[:1])
    assert bitcheck.main(["compare", "--partial", str(before), str(after)]) == 1
    assert "DIFFERENT" in row(capsys.readouterr().out, KEYS[0])
    assert bitcheck.main(["compare", "--partial", str(before), str(write_result(tmp_path / "d", keys=["x@64-xnnpack"]))]) == 2
