"""Sharded decode (mla_jax.sharded) on 8 simulated CPU devices.

The devices need ``--xla_force_host_platform_device_count=8`` before JAX starts its
backend, and the rest of the suite has already started it with one device, so the
checks run in two child processes (this file, run as a script, one per core), each
printing one JSON line of measurements; the tests below assert on them. Checked:

- sharded results against unsharded ``mla_decode`` (float32, xla backend) on 1-D
  meshes (``MLA_JAX_SHARDED_MESHES``, below) and a 2 x 4 mesh, both schemes, static,
  traced and run-time ``max_seq_len``;
- with ``policy="occupancy"``, against ``mla_decode`` run on each shard alone;
- the buffer's shard shapes against ``reserve_logits_buffer`` for one shard;
- a jitted ``lax.scan`` threading the donated buffer and caches, with no collective;
- the Triton path exported for CUDA (sm_90) with the sharding: one stage-1 /
  stage-2 pair in the per-shard program, at per-shard shapes, buffer aliased;
- the errors.

``MLA_JAX_SHARDED_MESHES`` (comma-separated device counts, from 1, 2, 4 and 8) says on
which 1-D meshes the sharded step is compared with the unsharded one. The default,
as in CI, is ``1,4``: one device, where the result must be bitwise, and 4, with
several rows and heads a shard and the traced length. Meshes of 2 and 8 take the
same path through ``sharded_mla_decode`` as 4 (the scan runs on all 8 devices, one
row a shard); ``MLA_JAX_SHARDED_MESHES=1,2,4,8`` compares on them too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from tests.cases import seed_for

# The repository, two folders up: the children import from it.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEVICES = 8
MESHES = (1, 2, 4, 8)  # 1-D meshes, all of them for the buffer shapes
MESHES_ENV = "MLA_JAX_SHARDED_MESHES"
COMPARED = tuple(int(n) for n in os.environ.get(MESHES_ENV, "1,4").split(","))
if set(COMPARED) - set(MESHES):
    raise ValueError(
        f"{MESHES_ENV} must be a comma-separated subset of {MESHES}, got {os.environ[MESHES_ENV]!r}"
    )
SCHEMES = ("heads", "batch")
SM = 1  # vLLM's cap: 2 splits, reached at 1024 tokens (few branches to compile)
SM_OCCUPANCY = 4  # where policy="occupancy" reserves 4 splits for 128 heads, 8 for 32
LORA, ROPE, PAGE, PAGES_PER_SEQ = 32, 16, 64, 32
CAPACITY = PAGE * PAGES_PER_SEQ  # 2048 tokens
BATCH, HEADS = 8, 16
MARK = "SHARDED_RESULTS "


# --------------------------------------------------------------------------- child


def _problem(rng, *, batch=BATCH, heads=HEADS, max_len=CAPACITY):
    """q ``[B, H, D]``, a cache of ``B * PAGES_PER_SEQ + 8`` pages, lengths (one 0)."""
    kv = rng.standard_normal((batch * PAGES_PER_SEQ + 8, PAGE, LORA + ROPE)).astype(np.float32)
    lens = rng.integers(1, max_len + 1, batch).astype(np.int32)
    lens[rng.integers(batch)] = 0  # an empty row: out = 0, lse = -inf
    q = rng.standard_normal((batch, heads, LORA + ROPE)).astype(np.float32)
    return q, kv, lens


def _tables(rng, n, kv, batch=BATCH):
    """The cache as n page pools: local and global block tables, int32 ``[B, pages]``.

    Device i's pool is pages ``[i * pool, (i + 1) * pool)``; its rows' local entries
    index that pool, their global entries the whole cache (entry + i * pool).
    """
    rows, pool = batch // n, kv.shape[0] // n
    local = np.concatenate(
        [rng.permutation(pool)[: rows * PAGES_PER_SEQ].reshape(rows, -1) for _ in range(n)]
    ).astype(np.int32)
    return local, local + (np.arange(batch) // rows * pool)[:, None].astype(np.int32)


def _err(a, b) -> float:
    """Max abs difference, with equal infinities (lse of empty rows) counted as 0."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if not np.array_equal(np.isinf(a), np.isinf(b)) or not np.array_equal(
        a[np.isinf(a)], b[np.isinf(b)]
    ):
        return float("inf")
    finite = ~np.isinf(a)
    return float(np.abs(a[finite] - b[finite]).max(initial=0.0))


def _spec(x) -> str:
    x = getattr(x, "data", x)  # a LogitsBuffer's array
    return str(tuple(x.sharding.spec))


def _check_against_unsharded(rng):
    """Every compared mesh and scheme, static and run-time max_seq_len (a traced one on
    4 devices, batch scheme), against one unsharded call on the same problem."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh

    import mla_jax
    from mla_jax.sharded import reserve_sharded_logits_buffer, sharded_mla_decode

    q, kv, lens = _problem(rng)
    lengths = {"static": int(lens.max()), "traced": jnp.int32(lens.max()), "none": None}
    results = {}
    for n in COMPARED:
        mesh = Mesh(np.array(jax.devices()[:n]), ("x",))
        local, global_ = _tables(rng, n, kv)
        for kind in ("static", "traced", "none") if n == 4 else ("static", "none"):
            schemes = ("batch",) if kind == "traced" else SCHEMES
            want_out, want_lse, _ = mla_jax.mla_decode(
                q,
                kv,
                global_,
                lens,
                mla_jax.reserve_logits_buffer(
                    BATCH, HEADS, CAPACITY, kv_lora_rank=LORA, rope_dim=ROPE, sm_count=SM
                ),
                scale=0.1,
                max_seq_len=lengths[kind],
                backend="xla",
            )
            for scheme in schemes:
                buf = reserve_sharded_logits_buffer(
                    mesh,
                    "x",
                    scheme,
                    BATCH,
                    HEADS,
                    CAPACITY,
                    kv_lora_rank=LORA,
                    rope_dim=ROPE,
                    sm_count=SM,
                )
                out, lse, new_buf = sharded_mla_decode(
                    mesh,
                    "x",
                    scheme,
                    q,
                    kv,
                    local if scheme == "batch" else global_,
                    lens,
                    buf,
                    scale=0.1,
                    max_seq_len=lengths[kind],
                    backend="xla",
                )
                results[f"{scheme}/{n}/{kind}"] = dict(
                    out=_err(out, want_out),
                    lse=_err(lse, want_lse),
                    bitwise=bool(np.array_equal(out, want_out) and np.array_equal(lse, want_lse)),
                    specs=[_spec(out), _spec(lse), _spec(new_buf)],
                    donated=buf.data.is_deleted(),
                    same_buffer_shape=new_buf.shape == buf.shape,
                )
    # A 2 x 4 mesh: the schemes split over "x"; the other axis holds replicas.
    mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("r", "x"))
    local, global_ = _tables(rng, 4, kv)
    want_out, want_lse, _ = mla_jax.mla_decode(
        q,
        kv,
        global_,
        lens,
        mla_jax.reserve_logits_buffer(
            BATCH, HEADS, CAPACITY, kv_lora_rank=LORA, rope_dim=ROPE, sm_count=SM
        ),
        scale=0.1,
        max_seq_len=lengths["static"],
        backend="xla",
    )
    for scheme in SCHEMES:
        buf = reserve_sharded_logits_buffer(
            mesh, "x", scheme, BATCH, HEADS, CAPACITY, kv_lora_rank=LORA, rope_dim=ROPE, sm_count=SM
        )
        out, lse, new_buf = sharded_mla_decode(
            mesh,
            "x",
            scheme,
            q,
            kv,
            local if scheme == "batch" else global_,
            lens,
            buf,
            scale=0.1,
            max_seq_len=lengths["static"],
            backend="xla",
        )
        results[f"{scheme}/2x4/static"] = dict(
            out=_err(out, want_out),
            lse=_err(lse, want_lse),
            bitwise=bool(np.array_equal(out, want_out) and np.array_equal(lse, want_lse)),
            specs=[_spec(out), _spec(lse), _spec(new_buf)],
            donated=buf.data.is_deleted(),
            same_buffer_shape=new_buf.shape == buf.shape,
        )
    return results


def _check_per_shard_occupancy(rng):
    """policy="occupancy" counts splits with the local batch and heads: the sharded
    step must equal mla_decode run on each shard alone, with a shard-sized buffer."""
    import jax
    from jax.sharding import Mesh

    import mla_jax
    from mla_jax.sharded import reserve_sharded_logits_buffer, sharded_mla_decode

    n, heads = 4, 128  # 128 heads: two 64-head tiles unsharded, one 32-head tile per shard
    mesh = Mesh(np.array(jax.devices()[:n]), ("x",))
    q, kv, lens = _problem(rng, heads=heads)
    local, global_ = _tables(rng, n, kv)
    length = int(lens.max())  # static: one split count per shard, one branch to compile
    results = {}
    for scheme in SCHEMES:
        buf = reserve_sharded_logits_buffer(
            mesh,
            "x",
            scheme,
            BATCH,
            heads,
            CAPACITY,
            kv_lora_rank=LORA,
            rope_dim=ROPE,
            sm_count=SM_OCCUPANCY,
            policy="occupancy",
        )
        table, splits = local if scheme == "batch" else global_, buf.shape[2]
        out, lse, _ = sharded_mla_decode(
            mesh, "x", scheme, q, kv, table, lens, buf, scale=0.1, max_seq_len=length, backend="xla"
        )
        errs = []
        for i in range(n):
            if scheme == "heads":
                rows, cols, pool = slice(None), slice(i * heads // n, (i + 1) * heads // n), kv
            else:
                rows, cols = slice(i * BATCH // n, (i + 1) * BATCH // n), slice(None)
                pool = np.split(kv, n)[i]
            shard_q = q[rows, cols]
            shard_buf = mla_jax.reserve_logits_buffer(
                *shard_q.shape[:2],
                CAPACITY,
                kv_lora_rank=LORA,
                rope_dim=ROPE,
                sm_count=SM_OCCUPANCY,
                policy="occupancy",
            )
            want_out, want_lse, _ = mla_jax.mla_decode(
                shard_q,
                pool,
                table[rows],
                lens[rows],
                shard_buf,
                scale=0.1,
                max_seq_len=length,
                backend="xla",
            )
            errs += [
                _err(np.asarray(out)[rows, cols], want_out),
                _err(np.asarray(lse)[rows, cols], want_lse),
            ]
        results[scheme] = dict(err=max(errs), splits=splits)
    results["unsharded_splits"] = mla_jax.reserve_logits_buffer(
        BATCH,
        heads,
        CAPACITY,
        kv_lora_rank=LORA,
        rope_dim=ROPE,
        sm_count=SM_OCCUPANCY,
        policy="occupancy",
    ).shape[2]
    return results


def _check_buffer_shapes():
    """Each shard has the shape reserve_logits_buffer gives for that shard."""
    import jax
    from jax.sharding import Mesh

    import mla_jax
    from mla_jax.sharded import reserve_sharded_logits_buffer

    results = {}
    for n in MESHES:
        mesh = Mesh(np.array(jax.devices()[:n]), ("x",))
        for scheme in SCHEMES:
            for policy in ("vllm", "occupancy"):
                buf = reserve_sharded_logits_buffer(
                    mesh,
                    "x",
                    scheme,
                    16,
                    128,
                    16384,
                    kv_lora_rank=LORA,
                    rope_dim=ROPE,
                    sm_count=SM_OCCUPANCY,
                    policy=policy,
                )
                rows, heads = (16, 128 // n) if scheme == "heads" else (16 // n, 128)
                one = mla_jax.reserve_logits_buffer(
                    rows,
                    heads,
                    16384,
                    kv_lora_rank=LORA,
                    rope_dim=ROPE,
                    sm_count=SM_OCCUPANCY,
                    policy=policy,
                )
                results[f"{scheme}/{n}/{policy}"] = dict(
                    shards=sorted({tuple(s.data.shape) for s in buf.data.addressable_shards}),
                    devices=len(buf.data.addressable_shards),
                    expected=list(one.shape),
                    global_=list(buf.shape),
                    spec=_spec(buf),
                    nan=bool(np.isnan(np.asarray(buf.data)).all()),
                )
    return results


def _check_scan(rng, steps=4, n=8):
    """A jitted scan of ``steps`` decode steps on ``n`` devices: decode, append a row,
    feed the output to the next query, grow the lengths, with the sharded buffer and
    cache carried and donated. Against the same scan built from mla_decode."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import Mesh, NamedSharding

    import mla_jax
    from mla_jax.cache import append_latent
    from mla_jax.sharded import (
        partition_specs,
        reserve_sharded_logits_buffer,
        sharded_append_latent,
        sharded_mla_decode,
    )

    def make_loop(decode, append):
        def loop(q, kv, table, lens, buf):
            def body(carry, _):
                q, kv, lens, buf = carry
                out, lse, buf = decode(q, kv, table, lens, buf)
                # The new row is a function of the row's length: replicated with the
                # cache (heads) or local to the row's device (batch), as a layer's
                # latent projection of the replicated / local hidden state would be.
                row = jnp.cos(0.01 * lens[:, None] * jnp.arange(1, LORA + ROPE + 1))
                kv = append(kv, row, table, lens)
                q = jnp.concatenate([out, q[..., LORA:]], -1) * 2.0
                return (q, kv, lens + 1, buf), (out, lse)

            (_, kv, lens, buf), (outs, lses) = lax.scan(body, (q, kv, lens, buf), length=steps)
            return outs, lses, kv, buf

        return jax.jit(loop, donate_argnames=("kv", "buf"))

    q, kv, lens = _problem(rng, max_len=CAPACITY - steps)
    mesh = Mesh(np.array(jax.devices()[:n]), ("x",))
    local, global_ = _tables(rng, n, kv)
    plain = make_loop(lambda *a: mla_jax.mla_decode(*a, scale=0.1, backend="xla"), append_latent)
    want = plain(
        q,
        jnp.asarray(kv),
        global_,
        lens,
        mla_jax.reserve_logits_buffer(
            BATCH, HEADS, CAPACITY, kv_lora_rank=LORA, rope_dim=ROPE, sm_count=SM
        ),
    )
    results = {}
    for scheme in SCHEMES:
        loop = make_loop(
            lambda *a, s=scheme: sharded_mla_decode(mesh, "x", s, *a, scale=0.1, backend="xla"),
            lambda *a, s=scheme: sharded_append_latent(mesh, "x", s, *a),
        )
        buf = reserve_sharded_logits_buffer(
            mesh, "x", scheme, BATCH, HEADS, CAPACITY, kv_lora_rank=LORA, rope_dim=ROPE, sm_count=SM
        )
        cache = jax.device_put(kv, NamedSharding(mesh, partition_specs("x", scheme)["kv_cache"]))
        args = (q, cache, local if scheme == "batch" else global_, lens, buf)
        compiled = loop.lower(*args).compile()
        got = compiled(*args)
        text = compiled.as_text()
        aliases = re.search(r"input_output_alias=\{([^\n]*)\}\s*,? ?entry", text)
        results[scheme] = dict(
            out=_err(got[0], want[0]),
            lse=_err(got[1], want[1]),
            kv=_err(got[2], want[2]),
            donated=[cache.is_deleted(), buf.data.is_deleted()],
            buffer_spec=_spec(got[3]),
            cache_spec=_spec(got[2]),
            aliases=aliases.group(1) if aliases else text[:2000],
            collectives=sorted(
                set(
                    re.findall(
                        r"\b(all-reduce|all-gather|all-to-all|collective-permute|reduce-scatter)",
                        text,
                    )
                )
            ),
        )
    return results


def _check_cuda_lowering():
    """The triton path exported for CUDA (sm_90) with the 8-device sharding.

    The module reads: ``main`` -> ``_sharded_step`` -> one ``sdy.manual_computation``
    (the shard_map body, per-shard shapes) -> ``_decode_step`` -> the two kernels.
    """
    import jax
    import jax.numpy as jnp
    from jax import export
    from jax.sharding import Mesh, NamedSharding

    import mla_jax
    from mla_jax.sharded import partition_specs, sharded_mla_decode
    from tests.kernel_calls import DISABLED, kernel_calls

    mesh = Mesh(np.array(jax.devices()), ("x",))
    batch, heads, lora, rope, page, pages = 16, 128, 512, 64, 64, 8
    results = {}
    # heads: q [B, H, 576], static max_seq_len; batch: the (q_nope, q_pe) pair, None.
    for scheme, length, pair in (("heads", 4096, False), ("batch", None, True)):
        specs = partition_specs("x", scheme)
        spec = lambda shape, dtype, name, specs=specs: jax.ShapeDtypeStruct(
            shape, dtype, sharding=NamedSharding(mesh, specs[name])
        )
        q = (
            (
                spec((batch, heads, lora), jnp.bfloat16, "q"),
                spec((batch, heads, rope), jnp.bfloat16, "q"),
            )
            if pair
            else spec((batch, heads, lora + rope), jnp.bfloat16, "q")
        )
        args = (
            q,
            spec((batch * pages, page, lora + rope), jnp.bfloat16, "kv_cache"),
            spec((batch, pages), jnp.int32, "block_table"),
            spec((batch,), jnp.int32, "seq_lens"),
            mla_jax.LogitsBuffer(
                spec((batch, heads, 16, lora + 1), jnp.float32, "logits_buffer"),
                kv_lora_rank=lora,
                rope_dim=rope,
                policy="vllm",
                sm_count=132,
            ),
        )

        def step(q, kv, bt, sl, buf, length=length, scheme=scheme):
            return sharded_mla_decode(
                mesh,
                "x",
                scheme,
                q,
                kv,
                bt,
                sl,
                buf,
                scale=0.1,
                max_seq_len=length,
                backend="triton",
                compute_capability=90,
            )

        exported = export.export(
            jax.jit(step, donate_argnums=4), platforms=["cuda"], disabled_checks=DISABLED
        )(*args)
        text = exported.mlir_module()
        lines = text.splitlines()
        calls = []
        for call in kernel_calls(text):
            types = re.search(r"\} : \((.*)\) -> (.*) loc", call.line)
            calls.append(
                dict(
                    name=call.stage,
                    operands=call.operands,
                    aliases=call.aliases,
                    operand_types=re.findall(r"tensor<([^>]*)>", types.group(1)),
                    result_types=re.findall(r"tensor<([^>]*)>", types.group(2)),
                )
            )
        main = next(ln for ln in lines if "func.func public @main" in ln)
        decode = next(ln for ln in lines if "func.func private @_decode_step" in ln)
        manual = re.search(
            r"sdy.manual_computation\(([^)]*)\).*manual_axes=\{[^}]*\} "
            r"\((.*)\) \{",
            text,
        )
        buffer = 4 + pair  # the buffer's position among the flattened arguments
        results[scheme] = dict(
            length=str(length),
            pair=pair,
            buffer=buffer,
            devices=exported.nr_devices,
            calls=calls,
            donor=re.search(rf"%arg{buffer}: tensor<[^>]*> \{{([^}}]*)\}}", main).group(1),
            main_call=re.search(r"call @_sharded_step\(([^)]*)\)", text).group(1).split(", "),
            manual_operands=manual.group(1).split(", "),
            manual_args=re.findall(r"(%arg\d+): tensor<([^>]*)>", manual.group(2)),
            shard_call=re.search(r"call @_decode_step\(([^)]*)\)", text).group(1).split(", "),
            decode_args=re.findall(r"(%arg\d+): tensor<([^>]*)>", decode),
            manual_computations=text.count("sdy.manual_computation("),
            concatenates=text.count("stablehlo.concatenate"),
            kernel_calls=len(kernel_calls(text)),
        )
    return results


def _check_errors():
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh

    import mla_jax
    from mla_jax.sharded import reserve_sharded_logits_buffer, sharded_mla_decode

    mesh = Mesh(np.array(jax.devices()), ("x",))
    zeros = lambda *shape, dtype=jnp.float32: jnp.zeros(shape, dtype)

    def decode(scheme, batch, heads, axis="x"):
        return sharded_mla_decode(
            mesh,
            axis,
            scheme,
            zeros(batch, heads, LORA + ROPE),
            zeros(8 * batch, PAGE, LORA + ROPE),
            zeros(batch, 4, dtype=jnp.int32),
            zeros(batch, dtype=jnp.int32),
            mla_jax.LogitsBuffer(
                zeros(batch, heads, 2, LORA + 1),
                kv_lora_rank=LORA,
                rope_dim=ROPE,
                policy="vllm",
                sm_count=SM,
            ),
            scale=0.1,
            backend="xla",
        )

    cases = {
        "heads": lambda: decode("heads", 8, 12),
        "batch": lambda: decode("batch", 6, 16),
        "axis": lambda: decode("heads", 8, 16, axis="y"),
        "scheme": lambda: decode("rows", 8, 16),
        "reserve_heads": lambda: reserve_sharded_logits_buffer(
            mesh, "x", "heads", 8, 12, 4096, sm_count=SM
        ),
        "reserve_rows": lambda: reserve_sharded_logits_buffer(
            mesh, "x", "batch", 12, 16, 4096, sm_count=SM
        ),
        "too_long": lambda: sharded_mla_decode(
            mesh,
            "x",
            "heads",
            zeros(8, 16, LORA + ROPE),
            zeros(8, PAGE, LORA + ROPE),
            zeros(8, 4, dtype=jnp.int32),
            zeros(8, dtype=jnp.int32),
            reserve_sharded_logits_buffer(
                mesh,
                "x",
                "heads",
                8,
                16,
                512,
                kv_lora_rank=LORA,
                rope_dim=ROPE,
                sm_count=SM,
                policy="vllm",
            ),
            scale=0.1,
            max_seq_len=4096,
            backend="xla",
        ),
        "sm_count": lambda: reserve_sharded_logits_buffer(mesh, "x", "heads", 8, 16, 4096),
    }
    results = {}
    for name, call in cases.items():
        try:
            call()
            results[name] = "no error"
        except ValueError as e:
            results[name] = f"ValueError: {e}"
    return results


CHECKS = dict(
    unsharded=_check_against_unsharded,
    occupancy=_check_per_shard_occupancy,
    buffers=lambda _rng: _check_buffer_shapes(),
    scan=_check_scan,
    cuda=lambda _rng: _check_cuda_lowering(),
    errors=lambda _rng: _check_errors(),
)
# Two children, one per core: compilation dominates and is mostly single-threaded.
# Each prints how long its checks took ("seconds" in the results).
GROUPS = (("unsharded",), ("occupancy", "buffers", "scan", "cuda", "errors"))


def _child(seed: int, names: list[str]) -> None:
    import time
    import traceback

    import jax

    assert len(jax.devices()) == DEVICES, jax.devices()
    rng = np.random.default_rng(seed)
    results, times = {}, {}
    for name in names:
        start = time.perf_counter()
        try:
            results[name] = CHECKS[name](rng)
        except Exception:  # reported by the test that reads it
            results[name] = {"child_error": traceback.format_exc()}
        times[name] = round(time.perf_counter() - start, 2)
    results["seconds"] = times
    print(MARK + json.dumps(results), flush=True)


# -------------------------------------------------------------------------- parent


@pytest.fixture(scope="module")
def child(request):
    """Runs the groups in parallel child processes; returns (seed, merged results).

    The seed is the module's (``tests.conftest.seed_for``: stable, or ``MLA_JAX_SEED``);
    a failed test that reads these results reports it.
    """
    seed = seed_for(request.node)
    flags = os.environ.get("XLA_FLAGS", "")
    env = dict(
        os.environ,
        JAX_PLATFORMS="cpu",
        PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p),
        XLA_FLAGS=f"{flags} --xla_force_host_platform_device_count={DEVICES}".strip(),
    )
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, str(seed), *names],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=os.path.dirname(os.path.abspath(__file__)),
        )
        for names in GROUPS
    ]
    merged = {"seconds": {}}
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=600)
        lines = [ln for ln in stdout.splitlines() if ln.startswith(MARK)]
        assert proc.returncode == 0 and lines, f"seed {seed}\n{stdout[-3000:]}\n{stderr[-6000:]}"
        results = json.loads(lines[-1][len(MARK) :])
        merged["seconds"].update(results.pop("seconds"))
        merged.update(results)
    return seed, merged


def _get(child, name):
    seed, results = child
    got = results[name]
    assert "child_error" not in got, f"seed {seed}: {got['child_error']}"
    return got


@pytest.mark.parametrize("scheme", SCHEMES)
def test_sharded_equals_unsharded(child, scheme):
    got = {k: v for k, v in _get(child, "unsharded").items() if k.startswith(scheme + "/")}
    want = {f"{scheme}/{n}/{kind}" for n in COMPARED for kind in ("static", "none")}
    want |= {f"{scheme}/2x4/static"}
    if scheme == "batch" and 4 in COMPARED:
        want.add("batch/4/traced")
    assert set(got) == want
    split = {"heads": "(None, 'x')", "batch": "('x',)"}[scheme]
    for key, r in got.items():
        # Rounding differs only where a shard's program or split count does: batch
        # with max_seq_len=None counts splits from the shard's own longest row.
        assert r["out"] <= 1e-6 and r["lse"] <= 1e-6, (child[0], key, r)
        if key.split("/")[1] == "1":  # one device: the unsharded step, bitwise
            assert r["bitwise"] and r["specs"] in ([split] * 3, ["()"] * 3), (key, r)
        else:
            assert r["specs"] == [split] * 3, (key, r)
        assert r["donated"] and r["same_buffer_shape"], (key, r)


def test_occupancy_policy_counts_splits_per_shard(child):
    got = _get(child, "occupancy")
    for scheme in SCHEMES:
        assert got[scheme]["err"] <= 1e-6, (child[0], scheme, got[scheme])
    # 32 heads per shard are reserved (and run) with more splits than 128 heads.
    assert got["heads"]["splits"] > got["unsharded_splits"] == got["batch"]["splits"], got


def test_buffer_shards_match_the_unsharded_reservation_of_a_shard(child):
    got = _get(child, "buffers")
    for n in MESHES:
        for scheme in SCHEMES:
            for policy in ("vllm", "occupancy"):
                r = got[f"{scheme}/{n}/{policy}"]
                assert r["shards"] == [r["expected"]] and r["devices"] == n, r
                assert r["global_"][:2] == [16, 128] and r["global_"][2:] == r["expected"][2:]
                assert r["nan"], r
    # Heads-parallel occupancy reserves for the local heads: 16 heads per shard fill
    # one stage-1 tile, so they get more splits than 128 heads in two tiles.
    assert got["heads/8/occupancy"]["expected"][2] > got["heads/1/occupancy"]["expected"][2]


@pytest.mark.parametrize("scheme", SCHEMES)
def test_jitted_scan_threads_the_sharded_buffer_and_cache(child, scheme):
    r = _get(child, "scan")[scheme]
    # heads came out bitwise; batch counts each shard's splits from its own longest
    # row (max_seq_len=None), so its rounding differs from the unsharded run's, ~1e-6.
    assert max(r["out"], r["lse"], r["kv"]) <= 1e-5, (child[0], r)
    assert r["donated"] == [True, True], r
    assert r["buffer_spec"] == {"heads": "(None, 'x')", "batch": "('x',)"}[scheme]
    assert r["cache_spec"] == {"heads": "()", "batch": "('x',)"}[scheme]
    # No communication: the inputs are placed as the scheme reads them.
    assert r["collectives"] == [], r["collectives"]
    # Parameters 1 (cache) and 4 (buffer) alias outputs 2 and 3: updated in place.
    assert re.search(r"\{2\}: \(1, \{\}, may-alias\)", r["aliases"]), r["aliases"]
    assert re.search(r"\{3\}: \(4, \{\}, may-alias\)", r["aliases"]), r["aliases"]


@pytest.mark.parametrize("scheme", SCHEMES)
def test_triton_path_lowers_for_cuda_once_per_shard_with_the_buffer_aliased(child, scheme):
    # heads: q [B, H, 576], max_seq_len=4096; batch: the (q_nope, q_pe) pair, None.
    r = _get(child, "cuda")[scheme]
    assert r["devices"] == DEVICES
    # One shard_map body, holding the two kernel calls once.
    assert r["manual_computations"] == 1 and r["kernel_calls"] == 2, r
    stage1, stage2 = r["calls"]
    assert (stage1["name"], stage2["name"]) == ("mla_decode_stage1", "mla_decode_stage2")
    # Per-shard shapes: 128 heads / 8 (heads), or 16 rows / 8 and 128 pages / 8 (batch).
    q, kv, buf = {
        "heads": (["16x16x576xbf16"] * 2, "128x64x576xbf16", "16x16x16x513xf32"),
        "batch": (["2x128x512xbf16", "2x128x64xbf16"], "16x64x576xbf16", "2x128x16x513xf32"),
    }[scheme]
    assert stage1["operand_types"][:3] == [*q, kv], stage1
    assert stage1["operand_types"][7] == buf and stage1["result_types"] == [buf], stage1
    assert stage2["operand_types"][0] == buf, stage2
    assert r["concatenates"] == 0  # the pair reaches the kernel as two operands
    # Stage 1's operand 7, aliased to its only result, is the shard of main's buffer
    # argument: main -> _sharded_step -> manual_computation binds it to a per-shard
    # block argument -> _decode_step's buffer argument -> stage 1.
    assert stage1["aliases"] == [7] and stage2["aliases"] == []
    b, arg = r["buffer"], f"%arg{r['buffer']}"
    assert r["main_call"][b] == arg and r["manual_operands"][b] == arg, r
    manual_buf = r["manual_args"][b]
    assert manual_buf[1] == buf and r["shard_call"][b] == manual_buf[0], r
    assert r["decode_args"][b] == [stage1["operands"][7], buf], r
    assert "jax.buffer_donor = true" in r["donor"], r["donor"]


def test_errors_name_what_to_change(child):
    got = _get(child, "errors")
    assert re.search(
        r"q: scheme='heads' splits its heads \(12\) over mesh axis 'x' of size 8", got["heads"]
    ), got["heads"]
    assert "q: scheme='batch' splits its batch (6)" in got["batch"], got["batch"]
    assert "axis 'y' is not an axis of the mesh" in got["axis"], got["axis"]
    assert "scheme must be 'heads' or 'batch'" in got["scheme"], got["scheme"]
    assert "num_heads: scheme='heads' splits its heads (12)" in got["reserve_heads"]
    assert "max_num_seqs: scheme='batch' splits its rows (12)" in got["reserve_rows"]
    assert "reserve it with max_model_len >= 4096" in got["too_long"], got["too_long"]
    # Without a GPU, sm_count=None plans for DEFAULT_SM_COUNT rather than raising.
    assert got["sm_count"] == "no error", got["sm_count"]


if __name__ == "__main__":
    _child(int(sys.argv[1]), sys.argv[2:] or list(CHECKS))


@pytest.mark.parametrize("scheme", ["heads", "batch"])
def test_fp8_and_batch_invariant_pass_through_on_one_device(scheme, rng):
    """k_scale (replicated), batch_invariant and fp8_mma reach every shard's mla_decode."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh

    import mla_jax
    from mla_jax.cache import quantize_fp8
    from mla_jax.sharded import reserve_sharded_logits_buffer, sharded_mla_decode
    from tests.cases import TINY, random_case

    case = random_case(
        rng, batch=2, heads=4, dims=TINY, page_size=16, pages_per_seq=8, seq_lens=[100, 37]
    )
    kv8, k_scale = quantize_fp8(jnp.asarray(case.kv_cache))
    args = (jnp.asarray(case.q), kv8, jnp.asarray(case.block_table), jnp.asarray(case.seq_lens))
    # "auto": triton on a GPU, where the xla backend refuses batch_invariant.
    kw = dict(scale=case.scale, backend="auto", k_scale=k_scale, batch_invariant=True, fp8_mma=True)
    mesh = Mesh(np.array(jax.devices()[:1]), ("x",))
    buf = reserve_sharded_logits_buffer(
        mesh, "x", scheme, 2, 4, 128, kv_lora_rank=TINY[0], rope_dim=TINY[1], sm_count=4
    )
    out, lse, _ = sharded_mla_decode(mesh, "x", scheme, *args, buf, **kw)
    ref_buf = mla_jax.reserve_logits_buffer(
        2, 4, 128, kv_lora_rank=TINY[0], rope_dim=TINY[1], sm_count=4
    )
    want_out, want_lse, _ = mla_jax.mla_decode(*args, ref_buf, **kw)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(want_out))
    np.testing.assert_array_equal(np.asarray(lse), np.asarray(want_lse))
    kv16 = jnp.asarray(case.kv_cache)
    buf = reserve_sharded_logits_buffer(
        mesh, "x", scheme, 2, 4, 128, kv_lora_rank=TINY[0], rope_dim=TINY[1], sm_count=4
    )
    with pytest.raises(ValueError, match="fp8_mma=True needs a float8_e4m3fn kv_cache"):
        sharded_mla_decode(
            mesh, "x", scheme, args[0], kv16, *args[2:], buf, scale=case.scale, fp8_mma=True
        )
