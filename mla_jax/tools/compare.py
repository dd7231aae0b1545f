"""``python -m mla_jax compare``: every available decode path on one seeded problem.

Paths, each scored against the ground truth (default: the float64 numpy reference):

  mla_jax-triton  mla_decode(backend="triton")        needs a CUDA GPU and triton
  jax-xla         mla_decode(backend="xla")
  jax-reference   dense jnp reference (float32)
  torch-dense     mla_jax.torch_ref dense             needs torch
  torch-split-kv  mla_jax.torch_ref two-stage         needs torch
  vllm            vLLM's decode_attention_fwd         CUDA + docs/vllm_kernel.md
  numpy-f64       float64 numpy reference

Unavailable paths are listed with the reason and do not fail the run; a path that
raises fails with the error. torch is imported only for the paths that need it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Callable
from typing import Any, NamedTuple, cast

import jax
import numpy as np

from mla_jax import Backend, reference
from mla_jax._checks import INT32_MAX
from mla_jax.buffers import DEFAULT_SM_COUNT, gpu_sm_count, reserve_logits_buffer
from mla_jax.decode import mla_decode
from mla_jax.splits import num_kv_splits
from mla_jax.tools.cli import Parser, fail, int_at_least, positive_int
from mla_jax.tools.problem import Problem, make_problem

PATHS = (
    "mla_jax-triton",
    "jax-xla",
    "jax-reference",
    "torch-dense",
    "torch-split-kv",
    "vllm",
    "numpy-f64",
)
# Bound on the relative errors ||a - b|| / ||b|| of out and of lse, per input dtype.
TOLERANCE = {"float32": 1e-4, "float16": 2e-3, "bfloat16": 1.5e-2}
# The split rules' SM count where no GPU can be asked (H200 / H100 SXM); the other
# tools import it from here.


class Unavailable(Exception):
    """A path this machine cannot run; the message says why."""


class PathOutput(NamedTuple):
    """One path's result as numpy: ``out [B, H, lora]`` in the path's dtype, ``lse [B, H]``.

    ``rows`` (bool ``[B]``) limits scoring to those rows; None scores all.
    """

    out: np.ndarray
    lse: np.ndarray
    num_splits: int | None
    rows: np.ndarray | None = None


class Score(NamedTuple):
    """One table row; the numbers are None where the path gave no result."""

    path: str
    available: bool
    note: str = ""
    num_splits: int | None = None
    max_abs_err: float | None = None
    rel_err: float | None = None
    lse_rel_err: float | None = None
    bitwise_equal: bool | None = None
    passed: bool | None = None


class Report(NamedTuple):
    """``compare``'s result: the scores, and every path's raw output for plots."""

    problem: Problem
    sm_count: int
    ground_truth: str
    tolerance: float
    outputs: dict[str, PathOutput]
    scores: list[Score]

    @property
    def passed(self) -> bool:
        return all(s.passed is not False for s in self.scores)


def device_memory_bytes() -> int:
    """What the first device can hold: a GPU's JAX limit, else the host's memory."""
    stats = jax.devices()[0].memory_stats() or {}
    if "bytes_limit" in stats:
        return int(stats["bytes_limit"])
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _numpy(t) -> np.ndarray:
    """A torch tensor as numpy in its own dtype (bfloat16 through JAX's ml_dtypes)."""
    from mla_jax.interop import to_jax

    return np.asarray(to_jax(t.detach().cpu()))


def _jax_arrays(pj: Problem) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """``(q, kv_cache, block_table, seq_lens)`` of ``Problem.as_jax()``'s result (the
    fields are typed for the numpy problem)."""
    return cast(
        tuple[jax.Array, jax.Array, jax.Array, jax.Array],
        (pj.q, pj.kv_cache, pj.block_table, pj.seq_lens),
    )


def _jax_decode(backend: Backend) -> Callable[..., PathOutput]:
    def run(p: Problem, pj: Problem, *, scale: float, sm_count: int, **_) -> PathOutput:
        if backend == "triton" and jax.default_backend() != "gpu":
            raise Unavailable("needs a CUDA GPU")
        batch, heads, _ = p.q.shape
        # vLLM's split rule, so every split-KV path here splits alike.
        buf = reserve_logits_buffer(
            batch,
            heads,
            max(1, p.max_seq_len),
            kv_lora_rank=p.kv_lora_rank,
            rope_dim=p.q.shape[2] - p.kv_lora_rank,
            sm_count=sm_count,
            policy="vllm",
        )
        try:
            out, lse, _buf = mla_decode(
                *_jax_arrays(pj), buf, scale=scale, max_seq_len=p.max_seq_len, backend=backend
            )
        except ImportError as e:  # triton (the optional dependency) missing on a GPU machine
            raise Unavailable(str(e)) from e
        return PathOutput(
            np.asarray(out), np.asarray(lse), int(num_kv_splits(p.max_seq_len, sm_count))
        )

    return run


def _jax_reference(p: Problem, pj: Problem, *, scale: float, **_) -> PathOutput:
    out, lse = reference.mla_decode_reference(
        *_jax_arrays(pj), scale=scale, kv_lora_rank=p.kv_lora_rank
    )
    return PathOutput(np.asarray(out), np.asarray(lse), None)


def _numpy_f64(p: Problem, _pj: Problem, *, scale: float, **_) -> PathOutput:
    out, lse = reference.mla_decode_reference_np(
        p.q, p.kv_cache, p.block_table, p.seq_lens, scale=scale, kv_lora_rank=p.kv_lora_rank
    )
    return PathOutput(out, lse, None)


def _torch_args(pj: Problem):
    """The problem's arrays as torch tensors sharing the JAX buffers (DLPack)."""
    try:
        from mla_jax.interop import to_torch
    except ImportError as e:
        raise Unavailable(f"needs torch ({e})") from e
    return [to_torch(a) for a in _jax_arrays(pj)]


def _torch_dense(p: Problem, pj: Problem, *, scale: float, **_) -> PathOutput:
    args = _torch_args(pj)
    from mla_jax.torch_ref import mla_decode_dense_torch

    out, lse = mla_decode_dense_torch(*args, scale=scale, kv_lora_rank=p.kv_lora_rank)
    return PathOutput(_numpy(out), _numpy(lse), None)


def _torch_split_kv(p: Problem, pj: Problem, *, scale: float, sm_count: int, **_) -> PathOutput:
    args = _torch_args(pj)
    from mla_jax.torch_ref import mla_decode_split_kv_torch

    splits = int(num_kv_splits(p.max_seq_len, sm_count))
    out, lse = mla_decode_split_kv_torch(
        *args, scale=scale, kv_lora_rank=p.kv_lora_rank, num_kv_splits=splits
    )
    return PathOutput(_numpy(out), _numpy(lse), splits)


def _vllm(
    p: Problem, pj: Problem, *, scale: float, sm_count: int, vllm_kernel: Any, **_
) -> PathOutput:
    args = _torch_args(pj)
    try:
        from mla_jax.tools import vllm_kernel as vk
    except ImportError as e:
        raise Unavailable(f"cannot import mla_jax.tools.vllm_kernel: {e}") from e
    if vllm_kernel is None or isinstance(vllm_kernel, (str, os.PathLike)):
        import torch

        if not torch.cuda.is_available():
            raise Unavailable("needs a CUDA GPU")
        try:
            mod = vk.load(vllm_kernel)
        except ImportError as e:
            raise Unavailable(f"cannot load the kernel: {e}") from e
        if mod is None:
            raise Unavailable(
                "no kernel file: --vllm-kernel or MLA_JAX_VLLM_KERNEL (docs/vllm_kernel.md)"
            )
        args = [a.cuda() for a in args]
    else:  # a module object, e.g. vllm_kernel.torch_reference_module() for a CPU dry run
        mod = vllm_kernel
    splits = int(num_kv_splits(p.max_seq_len, sm_count))
    out, lse = vk.vllm_decode(
        mod, *args, scale=scale, num_kv_splits=splits, kv_lora_rank=p.kv_lora_rank
    )
    # vLLM's stage 2 divides 0 by 0 on a row without tokens; score the others.
    return PathOutput(_numpy(out), _numpy(lse), splits, rows=p.seq_lens > 0)


RUNNERS: dict[str, Callable[..., PathOutput]] = {
    "mla_jax-triton": _jax_decode("triton"),
    "jax-xla": _jax_decode("xla"),
    "jax-reference": _jax_reference,
    "torch-dense": _torch_dense,
    "torch-split-kv": _torch_split_kv,
    "vllm": _vllm,
    "numpy-f64": _numpy_f64,
}


def _rel(diff: np.ndarray, ref: np.ndarray) -> float:
    """``||diff|| / ||ref||`` (plain ``||diff||`` when ``ref`` is all zeros)."""
    norm = float(np.linalg.norm(ref))
    return float(np.linalg.norm(diff)) / (norm if norm > 0 else 1.0)


def score(name: str, got: PathOutput, truth: PathOutput, tolerance: float) -> Score:
    """Errors of ``got`` against ``truth`` over the rows both ask to be scored.

    ``bitwise_equal``: ``got.out`` is identical to ``truth.out`` rounded to its dtype.
    """
    rows = np.ones(got.out.shape[0], bool)
    for limit in (got.rows, truth.rows):
        if limit is not None:
            rows &= limit
    a, b = got.out[rows].astype(np.float64), truth.out[rows].astype(np.float64)
    la, lb = got.lse[rows].astype(np.float64), truth.lse[rows].astype(np.float64)
    max_abs = float(np.abs(a - b).max(initial=0.0))  # NaN propagates: a NaN fails
    rel = _rel(a - b, b)
    finite = np.isfinite(lb)
    # Empty rows must give exactly -inf; anything else there is an infinite error.
    if np.array_equal(la[~finite], lb[~finite]) and np.isfinite(la[finite]).all():
        lse_rel = _rel(la[finite] - lb[finite], lb[finite])
    else:
        lse_rel = math.inf
    bitwise = np.array_equal(got.out[rows], truth.out[rows].astype(got.out.dtype))
    skipped = int((~rows).sum())
    return Score(
        name,
        True,
        f"{skipped} empty rows not scored" if skipped else "",
        got.num_splits,
        max_abs,
        rel,
        lse_rel,
        bitwise,
        bool(rel <= tolerance and lse_rel <= tolerance),
    )


def compare(
    problem: Problem,
    *,
    ground_truth: str = "numpy-f64",
    sm_count: int | None = None,
    vllm_kernel: str | os.PathLike | Any | None = None,
    inject: tuple[str, float] | None = None,
) -> Report:
    """Runs every path on ``problem`` and scores each against ``ground_truth``.

    Args:
      sm_count: for the split rule; default ``gpu_sm_count()`` (the GPU's, else an H200's).
      vllm_kernel: path of vLLM's ``triton_decode_attention.py`` (None: the loader's
        ``MLA_JAX_VLLM_KERNEL``), or an already loaded module, which then runs on the
        problem's device (``vllm_kernel.torch_reference_module()`` dry-runs on a CPU).
      inject: ``(path, rel)`` multiplies that path's softmax scale by ``1 + rel``, a
        deliberate mismatch to check that the comparison catches one.

    Raises ValueError when the ground-truth path is unknown, cannot run here or fails.
    """
    if ground_truth not in RUNNERS:
        raise ValueError(f"ground_truth must be one of {PATHS}, got {ground_truth!r}")
    sm_count = gpu_sm_count() if sm_count is None else sm_count
    pj = problem.as_jax()
    outputs, missing, errors = {}, {}, {}
    for name, runner in RUNNERS.items():
        scale = problem.scale * (1 + inject[1]) if inject and inject[0] == name else problem.scale
        try:
            outputs[name] = runner(
                problem, pj, scale=scale, sm_count=sm_count, vllm_kernel=vllm_kernel
            )
        except Unavailable as e:
            missing[name] = str(e)
        except Exception as e:  # one broken path must not hide the others
            errors[name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    if ground_truth not in outputs:
        why = missing.get(ground_truth) or errors[ground_truth]
        raise ValueError(f"ground truth {ground_truth} gave no result: {why}")
    tolerance = TOLERANCE[str(problem.q.dtype)]
    scores = [
        Score(name, False, missing[name])
        if name in missing
        else Score(name, True, errors[name], passed=False)
        if name in errors
        else score(name, outputs[name], outputs[ground_truth], tolerance)
        for name in PATHS
        if name != ground_truth
    ]
    return Report(problem, sm_count, ground_truth, tolerance, outputs, scores)


def describe(report: Report) -> dict:
    """The report as JSON-ready data (non-finite errors become null)."""
    p = report.problem
    finite = lambda v: v if not isinstance(v, float) or math.isfinite(v) else None
    return {
        "problem": {
            "batch": p.q.shape[0],
            "heads": p.q.shape[1],
            "seq_lens": p.seq_lens.tolist(),
            "page_size": p.kv_cache.shape[1],
            "dtype": str(p.q.dtype),
            "kv_lora_rank": p.kv_lora_rank,
            "rope_dim": p.q.shape[2] - p.kv_lora_rank,
            "scale": p.scale,
            "sm_count": report.sm_count,
        },
        "ground_truth": report.ground_truth,
        "tolerance": report.tolerance,
        "passed": report.passed,
        "paths": [{k: finite(v) for k, v in s._asdict().items()} for s in report.scores],
    }


def format_table(report: Report) -> str:
    """The report as a fixed-width text table."""
    d = describe(report)
    pr = d["problem"]
    lines = [
        f"problem: batch {pr['batch']}, heads {pr['heads']}, seq_lens {pr['seq_lens']}, "
        f"page {pr['page_size']}, {pr['dtype']}, lora {pr['kv_lora_rank']} + rope "
        f"{pr['rope_dim']}, sm_count {pr['sm_count']}",
        f"ground truth: {report.ground_truth}; PASS when the rel errs of out and lse "
        f"are <= {report.tolerance:g}",
        f"{'path':15s} {'max abs err':>11s} {'rel err':>9s} {'lse rel':>9s} {'splits':>6s} "
        f"{'bitwise':>7s}  result",
    ]
    num = lambda v, width: "-".rjust(width) if v is None else f"{v:{width}.2e}"
    for s in report.scores:
        result = ("n/a" if not s.available else "PASS" if s.passed else "FAIL") + (
            f" ({s.note})" if s.note else ""
        )
        bitwise = "-" if s.bitwise_equal is None else "yes" if s.bitwise_equal else "no"
        lines.append(
            f"{s.path:15s} {num(s.max_abs_err, 11)} {num(s.rel_err, 9)} "
            f"{num(s.lse_rel_err, 9)} {s.num_splits or '-':>6} {bitwise:>7s}  {result}"
        )
    return "\n".join(lines)


def _inject(text: str) -> tuple[str, float]:
    path, _, rel = text.partition("=")
    try:
        value = float(rel)
    except ValueError:
        value = math.nan
    if path not in PATHS or not math.isfinite(value):
        raise argparse.ArgumentTypeError(
            f"got {text!r}, needed PATH=REL, PATH one of {', '.join(PATHS)}, REL a finite number"
        )
    return path, value


def _kernel_file(text: str) -> str:
    if not os.path.isfile(text):
        raise argparse.ArgumentTypeError(
            f"got {text!r}, which is not a file; needed vLLM's triton_decode_attention.py "
            "(docs/vllm_kernel.md)"
        )
    return text


def _size_problem(args: argparse.Namespace) -> str | None:
    """Why the problem asked for cannot be built here, or None; checked before the
    arrays are drawn (an oversized ``--batch`` would fill the memory)."""
    pages = args.batch * -(-args.max_len // args.page_size) + 3  # make_problem's extra pages
    sizes = f"--batch {args.batch}, --max-len {args.max_len}, --page-size {args.page_size}"
    if args.max_len > INT32_MAX or pages > INT32_MAX:
        return f"{sizes}: {pages} cache pages, past int32 lengths and page indices"
    width = args.kv_lora_rank + args.rope_dim
    # Drawn in float32, then cast; a path's outputs and temporaries take a few times q.
    need = (pages * args.page_size + 4 * args.batch * args.heads) * width * 4
    have = device_memory_bytes()
    if need > have:
        return (
            f"{sizes}, --heads {args.heads}, --kv-lora-rank {args.kv_lora_rank}, --rope-dim "
            f"{args.rope_dim}: the problem needs {need / 2**30:.1f} GiB, more than this "
            f"device's {have / 2**30:.1f} GiB"
        )
    return None


def _parser() -> Parser:
    parser = Parser(
        "compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--batch", type=positive_int, default=4)
    parser.add_argument("--heads", type=positive_int, default=16)
    parser.add_argument(
        "--max-len",
        type=positive_int,
        default=2048,
        help="longest sequence; the others are ragged, one is empty",
    )
    parser.add_argument("--page-size", type=positive_int, default=16)
    parser.add_argument("--dtype", choices=tuple(TOLERANCE), default="bfloat16")
    parser.add_argument("--kv-lora-rank", type=positive_int, default=512)
    parser.add_argument("--rope-dim", type=positive_int, default=64)
    parser.add_argument("--seed", type=int_at_least(0), default=0)
    parser.add_argument("--ground-truth", choices=PATHS, default="numpy-f64")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--sm-count",
        type=positive_int,
        default=None,
        help=f"for the split rule (default: the GPU's, else {DEFAULT_SM_COUNT})",
    )
    parser.add_argument(
        "--vllm-kernel",
        metavar="PATH",
        type=_kernel_file,
        default=None,
        help="vLLM's triton_decode_attention.py (docs/vllm_kernel.md)",
    )
    # Hidden: PATH=REL scales one path's softmax scale by 1 + REL (tests the check).
    parser.add_argument("--inject", type=_inject, default=None, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    too_big = _size_problem(args)
    if too_big:
        return fail("compare", too_big)
    problem = make_problem(
        batch=args.batch,
        num_heads=args.heads,
        seq_lens=args.max_len,
        page_size=args.page_size,
        dtype=args.dtype,
        kv_lora_rank=args.kv_lora_rank,
        rope_dim=args.rope_dim,
        seed=args.seed,
        empty_rows=1 if args.batch > 1 else 0,
    )
    try:
        report = compare(
            problem,
            ground_truth=args.ground_truth,
            sm_count=args.sm_count,
            vllm_kernel=args.vllm_kernel,
            inject=args.inject,
        )
    except ValueError as e:
        return fail("compare", str(e))
    print(json.dumps(describe(report), indent=2) if args.json else format_table(report))
    return 0 if report.passed else 1
