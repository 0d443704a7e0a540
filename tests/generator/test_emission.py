"""Emission invariants of the step classes, the runtime each package carries and the constants read from runtime/.

* runtime_define reads `#define NAME value` from runtime/ (expressions, casts, #ifdef branches) and refuses a
  missing or ambiguous name;
* runtime_closure follows `#include "carve_*.h"` and pulls each header's source;
* a package carries the runtime its steps and fixed parts call: a classify cuda package has no device top-k, a
  detect one has; every `#include "carve_*.h"` of a generated source is carried; the CPU packages carry
  carve_model (and carve_model_mask.c for segmentation), cuda does not;
* generated calls and descriptors name weight offsets (W_* / B_*), never bare numbers, and each constant's value
  is the tensor's offset in the blob;
* no common template tests a backend's name; every step class has its macro in steps.c.j2.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from conftest import REPO
from carve.backends import emit_c, steps
from carve.backends.emit_c import runtime_closure, runtime_define


def test_runtime_define_reads_the_headers():
    text = (REPO / "runtime" / "carve_rt.h").read_text()
    abi = int(re.search(r"^#define CARVE_RT_ABI (\d+)$", text, re.M).group(1))
    assert runtime_define("CARVE_RT_ABI") == abi == emit_c.runtime_abi()
    assert runtime_define("CARVE_CU_BLAS_WORKSPACE_BYTES_SM90") == 32 << 20           # ((size_t)32 << 20)
    assert runtime_define("CARVE_CU_TOPK_CHUNK") == runtime_define("CARVE_CU_TOPK_THREADS") * \
        runtime_define("CARVE_CU_TOPK_ITEMS")                                          # defined from others
    # #ifdef CARVE_RT_NO_THREADS: 1 band, else 8
    assert runtime_define("CARVE_LETTERBOX_BANDS", defined=("CARVE_RT_NO_THREADS",)) == 1
    assert runtime_define("CARVE_LETTERBOX_BANDS") == 8


def test_runtime_define_refuses_missing():
    with pytest.raises(AssertionError, match="CARVE_NO_SUCH_CONSTANT"):
        runtime_define("CARVE_NO_SUCH_CONSTANT")


def test_runtime_closure():
    # without threads, carve_rt.h's #include "carve_pool.h" (in its #else branch) does not count
    got = runtime_closure(["carve_post.h"], ("CARVE_RT_NO_THREADS",))
    assert got == ["carve_post.c", "carve_post.h", "carve_post_shared.h", "carve_rt.c", "carve_rt.h"]
    assert set(runtime_closure(["carve_post.h"])) == set(got) | {"carve_pool.c", "carve_pool.h"}
    cuda = runtime_closure(["carve_cuda_topk.cu"])
    assert {"carve_cuda_impl.h", "carve_cuda.h", "carve_pre.c", "carve_post.c"} <= set(cuda)


@pytest.fixture(scope="module")
def cuda_packages():
    """The cuda package of the shipped demo model (detect) and its xnnpack / portable packages."""
    from carve.compiler import compile_model
    from conftest import SHAPES_MANIFEST, SHAPES_WEIGHTS
    return {be: compile_model(SHAPES_MANIFEST, be, SHAPES_WEIGHTS, 64).files for be in ("cuda", "xnnpack", "portable")}


def test_packages_carry_what_their_steps_call(shapes_built, cuda_packages):
    graph, programs, files = shapes_built
    for be, pkg in cuda_packages.items():
        carried = {p[len("runtime/"):] for p in pkg if p.startswith("runtime/")}
        want = set()
        for lay in programs[be]["layers"]:
            for st in lay["steps"]:
                want.update(st.runtime_files)
        assert want <= carried, (be, want - carried)
        for path, data in pkg.items():
            if path.endswith((".c", ".cu", ".h")) and not path.startswith("runtime/"):
                assert set(re.findall(r'#include "(carve_\w+\.h)"', data.decode())) <= carried, path
    assert "runtime/carve_cuda_topk.cu" in cuda_packages["cuda"]          # detect: device top-k
    assert "runtime/carve_xnn.c" not in cuda_packages["portable"]
    assert "runtime/carve_portable.c" not in cuda_packages["xnnpack"]
    assert not any(p.startswith("runtime/carve_mask") for p in cuda_packages["xnnpack"])  # no masks: detect


def test_kernels_are_chosen_once_at_create(shapes_built, cuda_packages):
    """Every kernel with instruction-set variants a package's steps call is picked once, at create, into the
    context's kernel table, and called through it: no per-call selection (carve_<kernel>() selects each time)."""
    _, programs, _ = shapes_built
    assert set(programs["xnnpack"]["kernels"]) == {"conv3x3s2_small_cin", "conv3x3s1_winograd", "dwconv3x3",
                                                   "epilogue", "attention"}
    assert set(programs["portable"]["kernels"]) == {"epilogue", "attention"}
    for be in ("xnnpack", "portable"):
        c = cuda_packages[be]["yolo26n_shapes.c"].decode()
        for k in programs[be]["kernels"]:
            assert c.count(f"m->k.{k} = carve_{k}_select(isa);") == 1, (be, k)
            assert c.count(f"m->k.{k}(") >= 1 and f"carve_{k}(" not in c, (be, k)
        assert c.count("carve_isa_detect()") == 1
    assert programs["cuda"]["kernels"] == [] and "carve_isa_detect" not in cuda_packages["cuda"]["yolo26n_shapes.cu"].decode()


def test_classify_cuda_has_no_device_topk():
    """A package carries only the runtime its steps call: a classify model has no end-to-end step."""
    from carve.backends import get_backend
    from carve.ir import Graph
    prog = dict(layers=[dict(steps=[steps.CuSoftmax(name="s", source="x", flops=0, shapes="", n=4, x_off="S_A",
                                                    y_off="S_B")])])
    graph = Graph(name="g", input="i", tensors={}, ops=[], outputs={"output0": "o"}, weights={}, layers=[], meta={})
    seeds = emit_c.package_runtime_seeds(get_backend("cuda"), graph, prog, {"weights_format": "blob",
                                                                             "weights_dtype": "f32"})
    files = runtime_closure(seeds)
    assert "carve_cuda_ops.cu" in files and "carve_cuda_topk.cu" not in files


@pytest.mark.parametrize("outputs", [("output0",), ("output0", "output1")])
def test_cpu_packages_carry_carve_model(outputs):
    """The CPU backends' lifecycle is runtime/carve_model.c: its files, the weights loader it includes and, for
    segmentation, carve_model_mask.c with carve_mask.c are carried; carve_pool only where the runtime is threaded
    (xnnpack); the cuda backend has its own lifecycle and carries none of it."""
    from carve.backends import get_backend
    from carve.ir import Graph
    graph = Graph(name="g", input="i", tensors={}, ops=[], outputs={o: o for o in outputs}, weights={}, layers=[],
                  meta={})
    opts = {"weights_format": "blob", "weights_dtype": "f32"}
    masks = {"carve_model_mask.c", "carve_mask.h", "carve_mask.c"}
    for be in ("xnnpack", "portable", "cuda"):
        backend = get_backend(be)
        files = set(runtime_closure(emit_c.package_runtime_seeds(backend, graph, dict(layers=[]), opts),
                                    backend.runtime_macros))
        model = {"carve_model.h", "carve_model.c", "carve_weights.h", "carve_weights.c"}
        if be == "cuda":
            assert not any(f.startswith("carve_model") for f in files), files
            continue
        assert model <= files, (be, model - files)
        assert (masks <= files) == ("output1" in outputs) and ("carve_model_mask.c" in files) == ("output1" in outputs)
        assert ("carve_pool.c" in files) == (be == "xnnpack"), be
        # the model source includes carve_model.h (model_includes: the seeds' headers)
        assert "carve_model.h" in emit_c.package_runtime_seeds(backend, graph, dict(layers=[]), opts)


def test_weight_offsets_are_named(shapes_built, cuda_packages):
    for be, ext in (("xnnpack", "c"), ("portable", "c"), ("cuda", "cu")):
        prog = shapes_built[1][be]
        src = cuda_packages[be][f"yolo26n_shapes.{ext}"].decode()
        assert not re.search(r"(m->weights \+ |W\(m, |\.weight_off = |\.bias_off = )\d", src), be
        defined = dict(re.findall(r"^#define ([WB]_\w+)\s+(\d+)u", src, re.M))
        assert len(defined) == len(prog["weight_refs"]) > 0
        blob = np.frombuffer(prog["blob"], dtype="<f4")
        for ref in prog["weight_refs"]:
            assert int(defined[ref.macro]) == int(ref) and f"{ref}" == ref.macro
            assert int(ref) % 16 == 0 and int(ref) < blob.size
        used = set(re.findall(r"\b([WB]_[A-Z0-9_]+)\b", src.split("// ---- Context", 1)[1]))
        used |= set(re.findall(r"\.(?:weight|bias)_off = ([WB]_\w+)", src))
        assert used <= set(defined)


def test_common_templates_name_no_backend():
    for t in (REPO / "templates" / "common").glob("*.j2"):
        assert not re.search(r"backend\s*[!=]=", t.read_text()), t.name


def test_every_step_class_has_its_macro():
    text = (REPO / "templates" / "common" / "steps.c.j2").read_text()
    macros = set(re.findall(r"{%\s*macro (\w+)\(", text))
    classes = [c for c in vars(steps).values() if isinstance(c, type) and issubclass(c, steps.Step) and c.macro]
    assert len(classes) >= 15
    for c in classes:
        assert c.macro in macros, c.__name__
        assert all(f in steps.RUNTIME_FAMILIES for f in c.families), c.__name__
