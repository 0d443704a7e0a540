"""Compare the GPU packages' layer dumps and outputs with the CPU (xnnpack) packages', computed on the dev machine.

    compare.py REF GOT OUT   (REF: ref/<name>/ dumps and ref/<name>.json; GOT: d-<name>/ dumps; OUT: <name>.json)
"""
import json, sys
from pathlib import Path
import numpy as np
ref, got, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
worst = {}
lines = []
runs = [(d.name, "d-" + d.name) for d in sorted(ref.iterdir()) if d.is_dir()]
runs += [(n, "d-" + n) for n in ("n320-nograph", "n320f16-caller") if (got / ("d-" + n)).is_dir()]
for name, g in runs:
    rdir = ref / name.split("-")[0]
    for f in sorted(rdir.glob("*.npy")):
        a = np.load(f).astype(np.float64); b = np.load(got / g / f.name).astype(np.float64)
        if a.shape != b.shape:
            lines.append(f"{name} {f.name}: shape {b.shape} != {a.shape}"); worst[name] = 1e9; continue
        if a.ndim == 3 and a.shape[-1] >= 6:  # e2e rows (the head's dump and output0): compare by rank, report class agreement
            cls_same = float(np.mean(a[0, :, 5] == b[0, :, 5]))
            lines.append(f"{name} {f.name}: rows {a.shape}, same class at rank {cls_same:.3f}, top-20 max|d| {np.abs(a[0,:20,:6]-b[0,:20,:6]).max():.3g}")
            continue
        e = float(np.abs(a - b).max() / max(np.abs(a).max(), 1e-12))
        worst[name] = max(worst.get(name, 0), e)
        lines.append(f"{name} {f.name}: shape {a.shape} max rel err {e:.3g}")
if (got / "d-n320f16-caller").is_dir():  # caller-owned memory must give the same bits as create
    diff = [f.name for f in sorted((got / "d-n320f16").glob("*.npy"))
            if not np.array_equal(np.load(f), np.load(got / "d-n320f16-caller" / f.name))]
    lines.append(f"n320f16 --caller-memory vs create: {'bit-identical' if not diff else 'DIFFERENT: ' + ', '.join(diff)}"
                 f" ({len(list((got / 'd-n320f16').glob('*.npy')))} dumps)")
    same = [json.loads((out / f).read_text())["detections"] for f in ("n320f16.json", "n320f16-caller.json")]
    lines.append(f"n320f16 --caller-memory detections: {'the same as create' if same[0] == same[1] else 'DIFFERENT'}")
for rj in sorted(ref.glob("*.json")):
    n = rj.stem
    try:
        r, g = json.loads(rj.read_text()), json.loads((out / f"{n}.json").read_text())
        if "top5" in r:  # classification: the same five classes, scores within
            same = [a["class_id"] for a in r["top5"]] == [b["class_id"] for b in g["top5"]]
            dsc = max(abs(a["score"] - b["score"]) for a, b in zip(r["top5"], g["top5"]))
            lines.append(f"{n} top-5: {'same classes' if same else 'DIFFERENT classes'}, max score diff {dsc:.3g}")
            continue
        r = [d for d in r["detections"] if d["score"] > 0.3]; g = [d for d in g["detections"] if d["score"] > 0.3]
        k = min(len(r), len(g), 30)
        dbox = max((max(abs(x - y) for x, y in zip(r[i]["box"], g[i]["box"])) for i in range(k)), default=0)
        dsc = max((abs(r[i]["score"] - g[i]["score"]) for i in range(k)), default=0)
        dkp = max((float(np.abs(np.array(r[i]["keypoints"]) - np.array(g[i]["keypoints"])).max()) for i in range(k)
                   if "keypoints" in r[i]), default=None)
        same = sum(r[i]["class_id"] == g[i]["class_id"] for i in range(k))
        lines.append(f"{n} detections > 0.3: cpu {len(r)}, gpu {len(g)}; first {k}: same class {same}/{k}, max box diff "
                     f"{dbox:.3g} px, max score diff {dsc:.3g}" + (f", max keypoint diff {dkp:.3g}" if dkp is not None else ""))
    except Exception as ex:
        lines.append(f"{n}: {ex!r}")
lines.append("worst layer max rel err: " + ", ".join(f"{k} {v:.3g}" for k, v in worst.items()))
print("\n".join(lines)); (out / "compare.txt").write_text("\n".join(lines) + "\n")
