"""The kernel choice (``mla_jax.plan``) over an enumeration of problems, and the
package's imports (no cycle)."""

from __future__ import annotations

import ast
import dataclasses
import itertools
from pathlib import Path

import pytest

from mla_jax import plan

ROOT = Path(__file__).resolve().parents[2] / "mla_jax"


def problem(batch, heads, length, cache="bfloat16", *, static=True, occupancy=True, **kw):
    """A step of DeepSeek's dims in 64-token pages on sm_90 at the split count the
    occupancy rule (or vLLM's) plans for rows of ``length`` on 132 SMs; ``static``:
    the step's tokens known at trace time (``batch_tokens``), as with a Python int
    ``max_seq_len``."""
    from mla_jax import splits

    tokens = batch * length if static else None
    count = splits.kv_splits(
        "occupancy" if occupancy else "vllm",
        batch=batch,
        num_heads=heads,
        max_seq_len=length,
        sm_count=132,
    )
    pages = length // 64
    row = 576
    return plan.Problem(
        batch=batch,
        num_heads=heads,
        num_pages=batch * pages,
        page_size=64,
        pages_per_seq=pages,
        kv_lora_rank=512,
        rope_dim=64,
        scale=0.1,
        grid_splits=count,
        q_nope_strides=(heads * row, row, 1),
        q_pe_strides=(heads * row, row, 1),
        qp_offset=512,
        kv_strides=(64 * row, row, 1),
        block_table_strides=(pages, 1),
        buffer_strides=(heads * count * 513, count * 513, 513, 1),
        q_dtype="bfloat16",
        kv_dtype=cache,
        compute_capability=90,
        max_tokens=length,
        batch_tokens=tokens,
        occupancy_sms=132 if occupancy else None,
        **kw,
    )


FP8 = "float8_e4m3fn"
# Representative problems of each family: (batch, heads, length, cache, keywords).
FAMILIES = [
    ((1, 128, 4096, "bfloat16"), {}, "narrow", 32),  # four 32-head tiles, small step
    ((4, 16, 4096, "bfloat16"), {}, "narrow", 16),
    ((1, 32, 1024, "bfloat16"), {}, "narrow", 16),  # two 16-head tiles a row
    ((16, 128, 16384, "bfloat16"), {}, "seesaw", 64),
    ((16, 128, 16384, FP8), {}, "seesaw", 64),
    ((4, 16, 4096, FP8), {}, "fp8_narrow", 16),
    ((4, 128, 2048, FP8), {"fp8_mma": True}, "fp8_mma", 64),
    ((1, 16, 1024, "bfloat16"), {}, "tl", 16),  # one-block splits
    ((4, 16, 4096, "bfloat16"), {"compute_capability": 80}, "tl", 16),
]


@pytest.mark.parametrize("args, kw, family, tile", FAMILIES, ids=str)
def test_each_family_is_chosen_for_its_problems(args, kw, family, tile):
    cc = kw.pop("compute_capability", 90)
    p = dataclasses.replace(problem(*args, **kw), compute_capability=cc)
    step = plan.plan(p)
    assert step.family == family and step.head_tile == tile
    assert plan.FAMILIES[step.stage1.kernel.__name__] == family
    assert step.grid_splits * step.split_divisor == p.grid_splits


def enumerate_problems():
    for batch, heads, length, cache, static, occupancy in itertools.product(
        (1, 4, 16, 64, 128),
        (16, 32, 64, 128),
        (1024, 4096, 16384),
        ("bfloat16", FP8),
        (True, False),
        (True, False),
    ):
        yield problem(batch, heads, length, cache, static=static, occupancy=occupancy)


def test_plan_is_a_pure_function_of_its_problem():
    """The same problem, built twice, plans the same (equal launches, equal kernels)."""
    for p in enumerate_problems():
        again = plan.Problem(**{f: getattr(p, f) for f in p.__dataclass_fields__})
        assert p == again and hash(p) == hash(again)
        assert plan.plan(p) == plan.plan(again)


def test_static_and_traced_max_seq_len_differ_only_where_documented():
    """A traced ``max_seq_len`` (no ``batch_tokens``) picks the same stage-1 kernel as a
    static one of the same length, but for the two documented differences (the module
    docstring of ``mla_jax.plan``): the 16-bit narrow kernel from 32 heads needs the
    step's tokens, and the tl kernel's 16-head tile of small steps does too."""
    for batch, heads, length, cache in itertools.product(
        (1, 4, 16, 64, 128), (16, 32, 64, 128), (1024, 4096, 16384), ("bfloat16", FP8)
    ):
        static = plan.plan(problem(batch, heads, length, cache))
        traced_problem = problem(batch, heads, length, cache, static=False)
        traced = plan.plan(traced_problem)
        if static.family == traced.family:
            small_step = batch * length <= plan._tiling.SMALL_BATCH_TOKENS
            if static.family == "tl" and small_step and heads > 16:
                assert (static.head_tile, traced.head_tile) == (16, plan._tiling.head_tile(heads))
            else:
                assert static.head_tile == traced.head_tile
            continue
        # The step's tokens chose the narrow kernel at 32-128 heads on a 16-bit cache;
        # without them the seesaw (or the tl kernel) runs.
        assert cache == "bfloat16" and heads >= 32, (batch, heads, length, cache)
        assert static.family == "narrow" and traced.family in ("seesaw", "tl")


def imports_of(path: Path, modules: dict[str, Path]) -> set[str]:
    """The mla_jax modules ``path`` imports, at module level or inside functions."""
    module = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
    package = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            # ``from package import module`` imports the module; a name from a
            # module imports that module.
            for a in node.names:
                sub = f"{base}.{a.name}"
                found.add(sub if sub in modules else base)
    return found


def test_no_import_cycle():
    """The import graph among mla_jax's modules (a package counts as its
    ``__init__``) has no cycle."""
    modules = {}
    for path in ROOT.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path
    assert "mla_jax.plan" in modules, ROOT  # the package was found
    graph = {
        m: {i for i in imports_of(p, modules) if i in modules and i != m}
        for m, p in modules.items()
    }
    state: dict[str, int] = {}

    def visit(m, stack):
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycle = stack[stack.index(n) :] + [n]
                raise AssertionError(" -> ".join(cycle))
            if n not in state:
                visit(n, stack + [n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])


KERNEL_MODULES = {"mla_jax.gluon.seesaw", "mla_jax.gluon.narrow", "mla_jax.gluon.fp8_mma"}


@pytest.mark.parametrize(
    "args, kw, loaded",
    [
        ((1, 16, 1024, "bfloat16"), {}, set()),  # the tl kernel
        ((64, 16, 4096, "bfloat16"), {}, {"mla_jax.gluon.narrow"}),
        ((16, 128, 16384, "bfloat16"), {}, {"mla_jax.gluon.seesaw"}),
        ((4, 128, 2048, FP8), {"fp8_mma": True}, {"mla_jax.gluon.fp8_mma"}),
    ],
    ids=str,
)
def test_a_process_imports_the_gluon_kernels_it_plans_only(args, kw, loaded):
    """Importing the Triton backend imports no Gluon kernel module, and planning a
    step imports its family's alone: defining a module's kernels parses their sources,
    time a new process's first call would otherwise spend on kernels it never runs."""
    import subprocess
    import sys

    code = (
        "import sys, dataclasses; import mla_jax._triton_backend; from mla_jax import plan; "
        "from tests.kernels.test_plan import KERNEL_MODULES, problem; "
        "before = KERNEL_MODULES & set(sys.modules); "
        f"plan.plan(problem(*{args!r}, **{kw!r})); "
        "print(sorted(before), sorted(KERNEL_MODULES & set(sys.modules)))"
    )
    root = str(ROOT.parent)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root
    ).stdout.split("\n")[-2]
    assert out == f"[] {sorted(loaded)}"
