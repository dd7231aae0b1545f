"""The sharded MLA decode across processes, checked against one process.

Every process runs this same program. It joins the others through
``jax.distributed.initialize``, builds one mesh over every process's devices, and
runs both schemes (``"heads"``, ``"batch"``) of ``mla_jax.sharded``:

- one ``sharded_mla_decode`` step, its logits buffer donated;
- a jitted ``lax.scan`` of ``--steps`` steps (decode, ``sharded_append_latent`` of a
  new row per sequence, a tenth of the output added to the next query, the lengths grown by
  one), with the logits buffer and the cache donated carries.

Each process builds its inputs from its own part of the problem with
``jax.make_array_from_process_local_data``. The problem comes from ``--seed`` and is
the same in every process, so every process also computes two references on its
own devices, without communication:

- per shard: the unsharded step and scan (``mla_decode``, ``append_latent``) on
  the inputs of each of this process's mesh devices, which is the program that
  device runs inside the sharded step; its shard of the results must be bitwise
  equal to it;
- unsharded: the whole problem on one local device. The gathered results
  (``process_allgather``) must agree within ``--atol`` and ``--rtol`` (those of
  ``np.allclose``); ``unsharded_bitwise`` says whether
  they are also bitwise equal.

The exit status is 1 when a check fails. ``--out DIR`` writes
``results-<process id>.json`` (the checks, the errors, SHA-256 digests of the
gathered results) and, from process 0, ``gathered.npz``; the same JSON is printed
on one line that starts with ``MULTIHOST_RESULTS``.

Two processes on one CPU machine, two simulated CPU devices each (a 4-device mesh):

    PORT=29500
    for i in 0 1; do
      python scripts/multihost_decode.py --num-processes 2 --process-id $i \\
          --coordinator 127.0.0.1:$PORT --local-device-count 2 --out /tmp/mh &
    done; wait

One process per GPU on a host with two GPUs (bf16, DeepSeek dims, Triton kernels):

    for i in 0 1; do
      python scripts/multihost_decode.py --num-processes 2 --process-id $i \\
          --coordinator 127.0.0.1:$PORT --local-device-ids $i --backend triton \\
          --dtype bfloat16 --kv-lora-rank 512 --rope-dim 64 --page-size 64 \\
          --batch 16 --heads 128 --pages-per-seq 16 --out /tmp/mh &
    done; wait

Several hosts: run it once per host with that host's ``--process-id``,
``--coordinator <host 0's address>:<port>``, or ``--coordinator auto`` under a
cluster launcher that ``jax.distributed.initialize()`` reads (SLURM, Open MPI).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # JAX is imported once XLA_FLAGS is set (configure_environment)
    from mla_jax import LogitsBuffer

SCHEMES = ("heads", "batch")
MARK = "MULTIHOST_RESULTS "
JOINED = "multihost_decode: joined:"  # printed once jax.distributed is up
AXIS = "x"


def add_process_arguments(p: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """The "processes" options every multi-process script here takes; returns the group."""
    g = p.add_argument_group("processes")
    g.add_argument("--num-processes", type=int, default=1)
    g.add_argument("--process-id", type=int, default=0)
    g.add_argument(
        "--coordinator",
        default=None,
        help="host:port where process 0 serves the coordinator; 'auto': let "
        "jax.distributed.initialize() read a cluster launcher's environment; "
        "omitted with one process: no jax.distributed at all",
    )
    g.add_argument(
        "--local-device-ids",
        default=None,
        help="comma-separated GPU ids this process uses (e.g. '1' for one process per GPU)",
    )
    g.add_argument(
        "--local-device-count",
        type=int,
        default=None,
        help="run on the CPU with this many simulated devices in this process (sets "
        "XLA_FLAGS and JAX_PLATFORMS=cpu before JAX starts)",
    )
    g.add_argument(
        "--init-timeout", type=int, default=120, help="seconds to wait for every process"
    )
    return g


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_process_arguments(p)
    g = p.add_argument_group("problem")
    g.add_argument("--schemes", default=",".join(SCHEMES), help="comma-separated")
    g.add_argument("--backend", choices=("auto", "xla", "triton"), default="auto")
    g.add_argument("--batch", type=int, default=8)
    g.add_argument("--heads", type=int, default=16)
    g.add_argument("--kv-lora-rank", type=int, default=32)
    g.add_argument("--rope-dim", type=int, default=16)
    g.add_argument("--page-size", type=int, default=16)
    g.add_argument("--pages-per-seq", type=int, default=8)
    g.add_argument("--steps", type=int, default=3, help="decode steps in the scan")
    g.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    g.add_argument(
        "--sm-count", type=int, default=None, help="default: the GPU's count; 1 on the CPU"
    )
    g.add_argument("--policy", choices=("vllm", "occupancy"), default="occupancy")
    g.add_argument(
        "--max-seq-len",
        choices=("none", "static"),
        default="none",
        help="'none': each shard counts splits from its own longest row at run time; "
        "'static': the global maximum as a Python int",
    )
    g.add_argument("--seed", type=int, default=0)
    g.add_argument(
        "--atol",
        type=float,
        default=None,
        help="absolute tolerance against the unsharded run (default 1e-5; bfloat16: 1e-2)",
    )
    g.add_argument(
        "--rtol",
        type=float,
        default=None,
        help="relative tolerance against the unsharded run (default 0; bfloat16: 2**-6, "
        "two of its rounding steps)",
    )
    p.add_argument("--out", type=Path, default=None, help="directory for the JSON files")
    p.add_argument(
        "--save-arrays",
        action="store_true",
        help="process 0 also writes the gathered results to OUT/gathered.npz",
    )
    args = p.parse_args(argv)
    check_args(args)
    return args


def check_process_args(args: argparse.Namespace) -> None:
    """ValueErrors naming the process option (``add_process_arguments``) to change."""
    if args.num_processes < 1:
        raise ValueError(f"--num-processes must be at least 1, got {args.num_processes}")
    if not 0 <= args.process_id < args.num_processes:
        raise ValueError(
            f"--process-id must be in [0, {args.num_processes}) for --num-processes "
            f"{args.num_processes}, got {args.process_id}"
        )
    if args.num_processes > 1 and args.coordinator is None:
        raise ValueError(
            "--num-processes > 1 needs --coordinator host:port (process 0's address and a "
            "free port, the same in every process), or --coordinator auto under a launcher"
        )
    if args.local_device_count is not None and args.local_device_count < 1:
        raise ValueError("--local-device-count must be at least 1")


def check_args(args: argparse.Namespace) -> None:
    """ValueErrors naming the argument to change."""
    check_process_args(args)
    schemes = args.schemes.split(",")
    if not schemes or set(schemes) - set(SCHEMES):
        raise ValueError(
            f"--schemes must be a comma-separated subset of {SCHEMES}, got {args.schemes!r}"
        )
    for name in (
        "batch",
        "heads",
        "kv_lora_rank",
        "rope_dim",
        "page_size",
        "pages_per_seq",
        "steps",
    ):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1")
    if args.steps >= args.page_size * args.pages_per_seq:
        raise ValueError(
            f"--steps {args.steps} leaves no room for the prompt in a capacity of "
            f"{args.page_size * args.pages_per_seq} tokens; raise --pages-per-seq"
        )
    if args.save_arrays and args.out is None:
        raise ValueError("--save-arrays writes into --out DIR: pass --out")


def configure_environment(args: argparse.Namespace) -> None:
    """CPU devices are set through XLA_FLAGS, which JAX reads when it starts."""
    if args.local_device_count is None:
        return
    if "jax" in sys.modules:
        raise ValueError(
            "--local-device-count must be applied before JAX is imported; run "
            "this script as a program, or set XLA_FLAGS yourself"
        )
    flags = [
        f
        for f in os.environ.get("XLA_FLAGS", "").split()
        if not f.startswith("--xla_force_host_platform_device_count")
    ]
    flags.append(f"--xla_force_host_platform_device_count={args.local_device_count}")
    os.environ["XLA_FLAGS"] = " ".join(flags)
    os.environ["JAX_PLATFORMS"] = "cpu"


def initialize(args: argparse.Namespace) -> None:
    import jax

    # CPU collectives between processes (process_allgather, and any cross-process
    # CPU computation); GPU collectives go through NCCL whatever this says.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if args.coordinator == "auto":
        jax.distributed.initialize(initialization_timeout=args.init_timeout)
    elif args.coordinator is not None:
        ids = (
            None
            if args.local_device_ids is None
            else [int(i) for i in args.local_device_ids.split(",")]
        )
        jax.distributed.initialize(
            coordinator_address=args.coordinator,
            num_processes=args.num_processes,
            process_id=args.process_id,
            local_device_ids=ids,
            initialization_timeout=args.init_timeout,
        )


# ------------------------------------------------------------------------- problem


def make_problem(args: argparse.Namespace, n: int) -> dict[str, Any]:
    """The global problem for a mesh of ``n`` devices, the same in every process.

    The cache is ``n`` page pools of ``pool`` pages; rows ``[i*B/n, (i+1)*B/n)`` use
    only pool ``i``. ``local`` holds their block tables with pool-local page numbers
    (the ``"batch"`` layout), ``global_`` the same pages numbered in the whole cache.
    """
    batch, pages = args.batch, args.pages_per_seq
    width = args.kv_lora_rank + args.rope_dim
    if batch % n:
        raise ValueError(f"--batch {batch} must be a multiple of the {n} mesh devices")
    if "heads" in args.schemes.split(",") and args.heads % n:
        raise ValueError(
            f"--heads {args.heads} must be a multiple of the {n} mesh devices "
            "for the 'heads' scheme"
        )
    rng = np.random.default_rng(args.seed)
    rows = batch // n
    pool = rows * pages + 2  # two pages no row uses in every pool
    capacity = pages * args.page_size
    kv = rng.standard_normal((n * pool, args.page_size, width), np.float32)
    q = rng.standard_normal((batch, args.heads, width), np.float32)
    lens = rng.integers(1, capacity - args.steps + 1, batch).astype(np.int32)
    lens[rng.integers(batch)] = 0  # an empty row: out = 0, lse = -inf at the first step
    local = np.concatenate(
        [rng.permutation(pool)[: rows * pages].reshape(rows, pages) for _ in range(n)]
    ).astype(np.int32)
    global_ = local + (np.arange(batch) // rows * pool)[:, None].astype(np.int32)
    # The appended row of a sequence is cos(length * w): a function of the row's own
    # state, as a layer's latent projection of its hidden state would be.
    w = rng.uniform(0.01, 0.1, width).astype(np.float32)
    return {
        "q": q,
        "kv": kv,
        "lens": lens,
        "local": local,
        "global_": global_,
        "w": w,
        "pool": pool,
        "capacity": capacity,
        "scale": width**-0.5,
    }


def shard_inputs(problem: dict[str, Any], scheme: str, n: int, i: int) -> dict[str, Any]:
    """The unsharded inputs that mesh device ``i`` works on under ``scheme``."""
    q, kv, lens = problem["q"], problem["kv"], problem["lens"]
    if scheme == "heads":
        h = q.shape[1] // n
        return {"q": q[:, i * h : (i + 1) * h], "kv": kv, "table": problem["global_"], "lens": lens}
    rows, pool = q.shape[0] // n, problem["pool"]
    r = slice(i * rows, (i + 1) * rows)
    return {
        "q": q[r],
        "kv": kv[i * pool : (i + 1) * pool],
        "table": problem["local"][r],
        "lens": lens[r],
    }


def process_local_part(sharding: Any, array: np.ndarray) -> np.ndarray:
    """This process's part of ``array`` under ``sharding``: the block spanned by its
    devices' indices (contiguous for a mesh of ``jax.devices()``, which lists the
    devices process by process)."""
    index = list(sharding.addressable_devices_indices_map(array.shape).values())
    block = []
    for dim, size in enumerate(array.shape):
        ranges = [ix[dim].indices(size)[:2] for ix in index]
        block.append(slice(min(r[0] for r in ranges), max(r[1] for r in ranges)))
    return array[tuple(block)]


# ------------------------------------------------------------------- computations


def reserve_buffer(
    args: argparse.Namespace, rows: int, heads: int, capacity: int, sm_count: int, device: Any
) -> LogitsBuffer:
    """The single-device buffer; the split policy and SM count travel with it."""
    import mla_jax

    return mla_jax.reserve_logits_buffer(
        rows,
        heads,
        capacity,
        kv_lora_rank=args.kv_lora_rank,
        rope_dim=args.rope_dim,
        sm_count=sm_count,
        device=device,
        policy=args.policy,
    )


def reserve_sharded_buffer(
    args: argparse.Namespace, mesh: Any, scheme: str, capacity: int, sm_count: int
) -> LogitsBuffer:
    from mla_jax.sharded import reserve_sharded_logits_buffer

    return reserve_sharded_logits_buffer(
        mesh,
        AXIS,
        scheme,
        args.batch,
        args.heads,
        capacity,
        kv_lora_rank=args.kv_lora_rank,
        rope_dim=args.rope_dim,
        sm_count=sm_count,
        policy=args.policy,
    )


def make_loop(decode: Callable, append: Callable, steps: int, lora: int, w: np.ndarray):
    """A jitted scan of ``steps`` decode steps; ``kv`` and ``buf`` are donated carries.

    Returns ``(outs [steps, B, H, lora], lses [steps, B, H], kv, buf)``.
    """
    import jax
    import jax.numpy as jnp

    def loop(q, kv, table, lens, buf):
        def body(carry, _):
            q, kv, lens, buf = carry
            out, lse, buf = decode(q, kv, table, lens, buf)
            row = jnp.cos(lens[:, None].astype(jnp.float32) * w).astype(kv.dtype)
            kv = append(kv, row, table, lens)
            # The next query takes a tenth of this step's output into its latent part:
            # every step depends on the one before, but a rounding difference (a split
            # count that differs between layouts) shrinks instead of growing.
            nope = q[..., :lora].astype(jnp.float32) + 0.1 * out.astype(jnp.float32)
            q = jnp.concatenate([nope.astype(q.dtype), q[..., lora:]], -1)
            return (q, kv, lens + 1, buf), (out, lse)

        (_, kv, _, buf), (outs, lses) = jax.lax.scan(body, (q, kv, lens, buf), length=steps)
        return outs, lses, kv, buf

    return jax.jit(loop, donate_argnames=("kv", "buf"))


class Unsharded:
    """One step and the scan through ``mla_decode`` / ``append_latent`` on one device:
    the single-process program, for the whole problem or for one shard's inputs.
    The jitted scan is built once, so shards of one shape share its compilation."""

    def __init__(
        self,
        args: argparse.Namespace,
        capacity: int,
        max_seq_len: int | None,
        sm_count: int,
        backend: str,
        scale: float,
        w: np.ndarray,
    ) -> None:
        import mla_jax
        from mla_jax.cache import append_latent

        def decode(q, kv, table, lens, buf):
            return mla_jax.mla_decode(
                q,
                kv,
                table,
                lens,
                buf,
                scale=scale,
                max_seq_len=max_seq_len,
                backend=backend,
            )

        self.args, self.capacity, self.sm_count, self.decode = args, capacity, sm_count, decode
        self.loop = make_loop(decode, append_latent, args.steps, args.kv_lora_rank, w)

    def __call__(self, inputs: dict[str, np.ndarray], device: Any) -> dict[str, np.ndarray]:
        import jax
        import jax.numpy as jnp

        dtype = jnp.dtype(self.args.dtype)
        q = jax.device_put(inputs["q"].astype(dtype), device)
        kv = jax.device_put(inputs["kv"].astype(dtype), device)
        table, lens = (
            jax.device_put(inputs["table"], device),
            jax.device_put(inputs["lens"], device),
        )
        rows, heads = inputs["q"].shape[:2]
        reserve = lambda: reserve_buffer(
            self.args, rows, heads, self.capacity, self.sm_count, device
        )
        out, lse, _ = self.decode(q, kv, table, lens, reserve())
        outs, lses, kv, _ = self.loop(q, kv, table, lens, reserve())
        results = {"step_out": out, "step_lse": lse, "outs": outs, "lses": lses, "kv": kv}
        return {name: np.asarray(x) for name, x in results.items()}


def run_sharded(
    args: argparse.Namespace,
    mesh: Any,
    scheme: str,
    problem: dict[str, Any],
    max_seq_len: int | None,
    sm_count: int,
    backend: str,
) -> dict[str, Any]:
    """One sharded step and the sharded scan, on inputs built from this process's part."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec

    from mla_jax.sharded import partition_specs, sharded_append_latent, sharded_mla_decode

    dtype = jnp.dtype(args.dtype)
    specs = partition_specs(AXIS, scheme)

    def global_array(name: str, array: np.ndarray) -> jax.Array:
        sharding = NamedSharding(mesh, specs[name])
        return jax.make_array_from_process_local_data(
            sharding, process_local_part(sharding, array), array.shape
        )

    table = problem["local"] if scheme == "batch" else problem["global_"]
    q = global_array("q", problem["q"].astype(dtype))
    table = global_array("block_table", table)
    lens = global_array("seq_lens", problem["lens"])
    scale = problem["scale"]

    def decode(q, kv, table, lens, buf):
        return sharded_mla_decode(
            mesh,
            AXIS,
            scheme,
            q,
            kv,
            table,
            lens,
            buf,
            scale=scale,
            max_seq_len=max_seq_len,
            backend=backend,
        )

    def append(kv, latent, table, positions):
        return sharded_append_latent(mesh, AXIS, scheme, kv, latent, table, positions)

    capacity = problem["capacity"]
    buf = reserve_sharded_buffer(args, mesh, scheme, capacity, sm_count)
    kv = global_array("kv_cache", problem["kv"].astype(dtype))
    out, lse, new_buf = decode(q, kv, table, lens, buf)
    step_donated = buf.data.is_deleted()
    loop = make_loop(decode, append, args.steps, args.kv_lora_rank, problem["w"])
    buf = reserve_sharded_buffer(args, mesh, scheme, capacity, sm_count)
    outs, lses, kv_after, buf_after = loop(q, kv, table, lens, buf)
    split = {"heads": (None, AXIS), "batch": (AXIS,)}[scheme]
    kv_split = () if scheme == "heads" else (AXIS,)
    # name: (array, the spec the scheme gives it); the scan stacks steps in front.
    placed = {
        "step_out": (out, split),
        "step_lse": (lse, split),
        "buffer": (new_buf.data, split),
        "outs": (outs, (None, *split)),
        "lses": (lses, (None, *split)),
        "kv": (kv_after, kv_split),
        "scan_buffer": (buf_after.data, split),
    }
    return {
        "arrays": {"step_out": out, "step_lse": lse, "outs": outs, "lses": lses, "kv": kv_after},
        "donated": {
            "step_buffer": step_donated,
            "scan_cache": kv.is_deleted(),
            "scan_buffer": buf.data.is_deleted(),
        },
        # Equivalent, not equal: on a 1-device mesh every spec places data alike.
        "specs_ok": {
            name: x.sharding.is_equivalent_to(NamedSharding(mesh, PartitionSpec(*spec)), x.ndim)
            for name, (x, spec) in placed.items()
        },
        "specs": {name: str(x.sharding.spec) for name, (x, _) in placed.items()},
    }


# --------------------------------------------------------------------- comparison


def max_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    """Max |a - b| in float64; equal infinities (lse of empty rows) count as 0, and a
    NaN or an infinity on one side only as inf."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return float("inf")
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    if same.all():
        return 0.0
    diff = np.abs(a[~same] - b[~same])
    return float(np.nan_to_num(diff, nan=np.inf).max())


def within(a: np.ndarray, b: np.ndarray, atol: float, rtol: float) -> bool:
    """``|a - b| <= atol + rtol * |b|`` everywhere, equal infinities and NaNs included."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))


def bitwise_equal(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def digest(a: np.ndarray) -> str:
    a = np.ascontiguousarray(a)
    return hashlib.sha256(f"{a.dtype}{a.shape}".encode() + a.tobytes()).hexdigest()[:16]


def shard_of(array: Any, device: Any) -> np.ndarray:
    return next(np.asarray(s.data) for s in array.addressable_shards if s.device == device)


def check_scheme(
    args: argparse.Namespace,
    mesh: Any,
    scheme: str,
    problem: dict[str, Any],
    unsharded: Unsharded,
    reference: dict[str, np.ndarray],
    max_seq_len: int | None,
    sm_count: int,
    backend: str,
    tolerance: tuple[float, float],
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    import jax
    from jax.experimental import multihost_utils

    n = mesh.devices.size
    start = time.perf_counter()
    got = run_sharded(args, mesh, scheme, problem, max_seq_len, sm_count, backend)
    sharded_s = time.perf_counter() - start

    # Per shard: each of this process's devices against the unsharded program on its
    # own inputs. Same program, same inputs: bitwise. It runs on this process's first
    # device (the devices are alike), so all shards share one compilation.
    start = time.perf_counter()
    mesh_index = {d: i for i, d in enumerate(mesh.devices.flat)}
    per_shard = {}
    for device in jax.local_devices():
        if device not in mesh_index:
            continue
        i = mesh_index[device]
        inputs = shard_inputs(problem, scheme, n, i)
        want = unsharded(inputs, jax.local_devices()[0])
        per_shard[str(i)] = {
            name: max_abs_diff(shard_of(got["arrays"][name], device), value)
            for name, value in want.items()
        }
    shard_s = time.perf_counter() - start

    # Gathered: the whole result on every process, against the unsharded run.
    gathered = {
        name: np.asarray(multihost_utils.process_allgather(x, tiled=True))
        for name, x in got["arrays"].items()
    }
    unsharded = {name: max_abs_diff(gathered[name], reference[name]) for name in gathered}
    bitwise = {name: bitwise_equal(gathered[name], reference[name]) for name in gathered}
    checks = {
        "per_shard_bitwise": all(v == 0.0 for d in per_shard.values() for v in d.values()),
        "unsharded_within_tolerance": all(
            within(gathered[name], reference[name], *tolerance) for name in gathered
        ),
        "donated": all(got["donated"].values()),
        "shardings": all(got["specs_ok"].values()),
        "every_device_checked": len(per_shard) == len(mesh.local_devices),
    }
    result = {
        "checks": checks,
        "per_shard": per_shard,
        "unsharded": unsharded,
        "unsharded_by_step": {
            name: [max_abs_diff(a, b) for a, b in zip(gathered[name], reference[name])]
            for name in ("outs", "lses")
        },
        "unsharded_bitwise": bitwise,
        "donated": got["donated"],
        "specs": got["specs"],
        "digests": {name: digest(a) for name, a in gathered.items()},
        "seconds": {"sharded": round(sharded_s, 2), "per_shard_reference": round(shard_s, 2)},
    }
    return result, gathered


# --------------------------------------------------------------------------- main


def run(args: argparse.Namespace) -> dict[str, Any]:
    start = time.perf_counter()
    initialize(args)
    import jax
    from jax.sharding import Mesh

    from mla_jax.sharded import partition_specs

    partition_specs(AXIS, "heads")  # the public API is importable before any work
    init_s = time.perf_counter() - start
    devices = jax.devices()
    print(f"{JOINED} process {jax.process_index()} of {jax.process_count()}, "
          f"{len(jax.local_devices())} of {len(devices)} devices", flush=True)  # fmt: skip
    mesh = Mesh(np.array(devices), (AXIS,))
    n = len(devices)
    platform = devices[0].platform
    backend = args.backend if args.backend != "auto" else ("triton" if platform == "gpu" else "xla")
    sm_count = args.sm_count
    if sm_count is None:
        sm_count = getattr(jax.local_devices()[0], "core_count", None) or 1
    f32 = args.dtype == "float32"
    atol = args.atol if args.atol is not None else (1e-5 if f32 else 1e-2)
    rtol = args.rtol if args.rtol is not None else (0.0 if f32 else 2.0**-6)
    problem = make_problem(args, n)
    lens = problem["lens"]
    max_seq_len = int(lens.max()) + args.steps - 1 if args.max_seq_len == "static" else None

    # Unsharded, on this process's first device: the single-process run.
    start = time.perf_counter()
    whole = {"q": problem["q"], "kv": problem["kv"], "table": problem["global_"], "lens": lens}
    unsharded = Unsharded(
        args, problem["capacity"], max_seq_len, sm_count, backend, problem["scale"], problem["w"]
    )
    reference = unsharded(whole, jax.local_devices()[0])
    reference_s = time.perf_counter() - start

    schemes, arrays = {}, {}
    for scheme in args.schemes.split(","):
        schemes[scheme], gathered = check_scheme(
            args,
            mesh,
            scheme,
            problem,
            unsharded,
            reference,
            max_seq_len,
            sm_count,
            backend,
            (atol, rtol),
        )
        arrays.update({f"{scheme}/{k}": v for k, v in gathered.items()})
    arrays.update({f"unsharded/{k}": v for k, v in reference.items()})
    checks = {f"{s}/{name}": ok for s, r in schemes.items() for name, ok in r["checks"].items()}
    results = {
        "ok": all(checks.values()),
        "checks": checks,
        "schemes": schemes,
        "process_id": jax.process_index(),
        "num_processes": jax.process_count(),
        "devices": n,
        "local_devices": [str(d) for d in jax.local_devices()],
        "platform": platform,
        "backend": backend,
        "sm_count": sm_count,
        "atol": atol,
        "rtol": rtol,
        "problem": {
            "batch": args.batch,
            "heads": args.heads,
            "kv_lora_rank": args.kv_lora_rank,
            "rope_dim": args.rope_dim,
            "page_size": args.page_size,
            "pages_per_seq": args.pages_per_seq,
            "steps": args.steps,
            "dtype": args.dtype,
            "policy": args.policy,
            "max_seq_len": args.max_seq_len,
            "seed": args.seed,
        },
        "seconds": {"initialize": round(init_s, 2), "unsharded_reference": round(reference_s, 2)},
    }
    return {"results": results, "arrays": arrays}


def write(args: argparse.Namespace, results: dict[str, Any], arrays: dict[str, Any]) -> None:
    line = json.dumps(results)
    print(MARK + line, flush=True)
    if args.out is None:
        return
    args.out.mkdir(parents=True, exist_ok=True)
    # jax's process index: under --coordinator auto, --process-id is not given.
    index = results.get("process_id", args.process_id)
    (args.out / f"results-{index}.json").write_text(json.dumps(results, indent=1))
    if args.save_arrays and index == 0 and arrays:
        # bfloat16 is no numpy dtype of its own: stored as float32 (exact).
        wide = {k.replace("/", "__"): v.astype(np.float32) if v.dtype.name == "bfloat16" else v
                for k, v in arrays.items()}  # fmt: skip
        np.savez(args.out / "gathered.npz", **wide)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_environment(args)
    start = time.perf_counter()
    try:
        out = run(args)
    except Exception:  # reported in the JSON and the exit status
        results = {"ok": False, "process_id": args.process_id, "error": traceback.format_exc()}
        write(args, results, {})
        print(results["error"], file=sys.stderr, flush=True)
        return 1
    out["results"]["seconds"]["total"] = round(time.perf_counter() - start, 2)
    write(args, out["results"], out["arrays"])
    import jax

    if args.num_processes > 1 or args.coordinator is not None:
        jax.distributed.shutdown()  # every process reaches it: a clean exit together
    if not out["results"]["ok"]:
        failed = [k for k, v in out["results"]["checks"].items() if not v]
        print(f"process {args.process_id}: checks failed: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
