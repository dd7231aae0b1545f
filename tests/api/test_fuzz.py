"""Hypothesis fuzzing: the xla backend and the interpreted kernels vs the float64 reference.

Each example is a whole decode problem: edge and random lengths, shuffled,
repeated or shared pages, garbage in dead block-table entries, NaN in every cache
row no live token owns (a read of one shows up as NaN), queries of several
magnitudes, and split counts decoupled from the lengths. The interpreted kernels run
half their problems inside NaN-poisoned allocations (``tests.interpreted.run``'s
``poison``), where a read past the cache or the table shows up too.

The xla backend recompiles for every new static shape, and compilation is most of
the time here (about 2 CPU-seconds a ``_decode_step``), so its problems come from a
fixed set of shapes (``XLA_SHAPES``), each compiled at most four times
(``max_seq_len`` None, an array, and two static values); lengths, tables, values and
the run-time split count vary freely within a shape. ``test_xla_backend`` is one test
item per shape, each with its share of the examples, so xdist spreads the
compilations over its workers and no two items compile the same program.
The interpreter compiles nothing, so its shapes are drawn freely, each example runs
several problems at once over the worker pool, and the examples are split over
``INTERPRETER_SHARDS`` items.

Every item runs its own hypothesis seed: ``tests.cases.seed_for`` of the item (stable,
or ``MLA_JAX_SEED``) mixed with the item's index. Profiles
(``MLA_JAX_FUZZ_PROFILE``): ``ci`` (the default) replays the same examples every run;
``nightly`` draws 10x as many from a fresh seed every run (unless ``MLA_JAX_SEED`` is
set), printed, and a failure reports it (``MLA_JAX_SEED=N MLA_JAX_FUZZ_PROFILE=nightly``
reruns it) and the blob that reproduces it (``@reproduce_failure``).
"""

import os
import secrets
import zlib
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

import mla_jax
from mla_jax.reference import mla_decode_reference_np
from tests.cases import DEEPSEEK, SEED_KEY, Case, seed_for, seed_from_env, tolerance
from tests.interpreted import run

# Per profile: xla problems, and interpreter examples of CASES_PER_CALL problems each
# (480 + 20 * 4 = 560 problems a ci run, 5600 a nightly one).
PROFILES = {"ci": (480, 20), "nightly": (4800, 200)}
CASES_PER_CALL = 4
INTERPRETER_SHARDS = 4
_COMMON = dict(database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("mla-jax-fuzz-ci", **_COMMON)
settings.register_profile("mla-jax-fuzz-nightly", print_blob=True, **_COMMON)
PROFILE = os.environ.get("MLA_JAX_FUZZ_PROFILE", "ci")
if PROFILE not in PROFILES:
    raise ValueError(f"MLA_JAX_FUZZ_PROFILE must be one of {sorted(PROFILES)}, got {PROFILE!r}")
XLA_EXAMPLES, INTERPRETER_EXAMPLES = PROFILES[PROFILE]
FUZZ = settings.get_profile(f"mla-jax-fuzz-{PROFILE}")


def shares(total: int, parts: int) -> list[int]:
    """``total`` examples over ``parts`` items, as evenly as integers allow."""
    return [total // parts + (i < total % parts) for i in range(parts)]


def run_seeded(request, index: int, test) -> None:
    """Runs the hypothesis ``test`` under this item's seed: fixed in ci, fresh in
    nightly (``MLA_JAX_SEED`` fixes either), mixed with ``index`` so that items given
    the same ``MLA_JAX_SEED`` still draw different examples."""
    if PROFILE == "nightly" and seed_from_env() is None:
        seed = secrets.randbits(32)
        request.node.stash[SEED_KEY] = seed  # reported on failure
    else:
        seed = seed_for(request.node)
    print(
        f"{request.node.nodeid}: profile {PROFILE}, seed {seed} "
        f"(MLA_JAX_SEED={seed} MLA_JAX_FUZZ_PROFILE={PROFILE} to rerun)"
    )
    hypothesis_seed(zlib.crc32(f"{seed}/{index}".encode()))(test)()


SM = 4  # caps vLLM's split count at 8: 1, 2, 4 and 8 are all reachable
MAX_MODEL_LEN = 4096  # the reservation: 8 splits


class Shape(NamedTuple):
    dims: tuple[int, int]  # kv_lora_rank, rope_dim
    dtype: type
    page_size: int
    batch: int
    heads: int
    pages_per_seq: int

    @property
    def capacity(self) -> int:
        return self.pages_per_seq * self.page_size

    @property
    def num_pages(self) -> int:
        return self.batch * self.pages_per_seq + 3  # a few pages no row holds


class XlaShape(NamedTuple):
    shape: Shape
    policy: str = "vllm"
    pair: bool = False  # q as (q_nope, q_pe)
    extra_rows: int = 0  # logits buffer rows past the batch


f32, f16 = np.float32, np.float16
XLA_SHAPES = [
    XlaShape(Shape((16, 16), f32, 1, 3, 2, 130)),
    XlaShape(Shape((16, 16), f16, 1, 5, 4, 70), extra_rows=2),
    XlaShape(Shape((32, 16), f32, 2, 4, 3, 300)),  # capacity 600: past one 512-token split
    XlaShape(Shape((16, 32), f16, 2, 2, 5, 40), pair=True),
    XlaShape(Shape((32, 32), f32, 16, 6, 16, 72)),  # 1152: 1 or 2 splits by length
    XlaShape(Shape((32, 16), f16, 16, 3, 7, 10), policy="occupancy"),
    XlaShape(Shape((16, 16), f32, 64, 4, 1, 20), extra_rows=1),
    XlaShape(Shape((32, 32), f16, 64, 7, 3, 3)),
    XlaShape(Shape((16, 32), f32, 16, 1, 20, 8), policy="occupancy", pair=True),
    XlaShape(Shape((16, 16), f32, 16, 16, 4, 4)),
    XlaShape(Shape(DEEPSEEK, f32, 64, 2, 4, 10)),
    XlaShape(Shape(DEEPSEEK, f16, 16, 3, 2, 6), pair=True),
]


@st.composite
def problems(draw, s: Shape) -> Case:
    """A decode problem of shape ``s``: lengths, pages and values drawn."""
    lora, rope = s.dims
    cap = s.capacity
    edges = sorted(
        {
            0,
            1,
            s.page_size - 1,
            s.page_size,
            s.page_size + 1,
            511,
            512,
            513,
            1023,
            1024,
            1025,
            cap - 1,
            cap,
        }
        & set(range(cap + 1))
    )
    length = st.one_of(st.sampled_from(edges), st.integers(0, cap))
    seq_lens = np.array(draw(st.lists(length, min_size=s.batch, max_size=s.batch)), np.int32)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))

    # Every row its own pages, pages repeated within and across rows, or every row on
    # the same pages (a shared prefix); reading a page twice is valid.
    layout = draw(st.sampled_from(["distinct", "repeated", "shared"]))
    if layout == "distinct":
        table = rng.permutation(s.num_pages)[: s.batch * s.pages_per_seq]
    elif layout == "repeated":
        pool = rng.permutation(s.num_pages)[: draw(st.integers(1, s.num_pages))]
        table = rng.choice(pool, s.batch * s.pages_per_seq)
    else:
        table = np.tile(rng.permutation(s.num_pages)[: s.pages_per_seq], s.batch)
    table = table.reshape(s.batch, s.pages_per_seq).astype(np.int32)
    dead = np.arange(s.pages_per_seq)[None, :] >= -(-seq_lens // s.page_size)[:, None]
    fill = draw(st.sampled_from(["stale", "random", -1, s.num_pages, 2**31 - 1]))
    if fill == "random":
        table[dead] = rng.integers(-(2**31), 2**31 - 1, dead.sum(), dtype=np.int64)
    elif fill != "stale":
        table[dead] = fill

    q_scale = draw(st.sampled_from([0.1, 1.0, 4.0, 16.0]))  # flat to peaked softmax
    q = (rng.standard_normal((s.batch, s.heads, lora + rope)) * q_scale).astype(s.dtype)
    kv = rng.standard_normal((s.num_pages, s.page_size, lora + rope)).astype(s.dtype)
    owned = np.zeros(kv.shape[:2], bool)
    for b, n in enumerate(seq_lens):
        tokens = np.arange(n)
        owned[table[b, tokens // s.page_size], tokens % s.page_size] = True
    kv[~owned] = np.nan
    # A fixed scale per shape: it is static, and a new value recompiles.
    return Case(q, kv, table, seq_lens, (lora + rope) ** -0.5, lora)


def logit_rounding(case: Case) -> float:
    """What float32 accumulation can move the output by: each logit is a dot of
    ``lora + rope`` products summed in float32, off by up to about ``eps`` times the
    sum of their magnitudes (times the softmax scale), and an output moves by that
    much times the largest value it averages. Negligible for O(1) logits; it matters
    for peaked softmaxes (large ``q``) at the 576-wide DeepSeek rows."""
    q, kv = np.abs(case.q.astype(np.float64)), case.kv_cache.astype(np.float64)
    live = np.isfinite(kv).all(axis=-1)
    rows = np.abs(kv[live])  # [live rows, D]
    if rows.size == 0:
        return 0.0
    worst_dot = float((q.reshape(-1, q.shape[-1]) @ rows.T).max())
    values = float(rows[:, : case.kv_lora_rank].max())
    return 4 * float(np.finfo(np.float32).eps) * case.scale * worst_dot * values


def assert_matches_reference(case: Case, out, lse) -> None:
    ref_out, ref_lse = mla_decode_reference_np(
        *case[:4], scale=case.scale, kv_lora_rank=case.kv_lora_rank
    )
    out, lse = np.asarray(out), np.asarray(lse)
    assert out.dtype == case.q.dtype and lse.dtype == np.float32
    np.testing.assert_allclose(
        out.astype(np.float64), ref_out, rtol=0, atol=tolerance(case.q.dtype) + logit_rounding(case)
    )
    np.testing.assert_allclose(lse, ref_lse, atol=1e-4, rtol=1e-5)
    empty = case.seq_lens == 0
    assert np.all(out[empty] == 0) and np.all(lse[empty] == -np.inf)


def xla_shape_id(xs: XlaShape) -> str:
    s = xs.shape
    flags = [xs.policy] + ["pair"] * xs.pair + [f"rows+{xs.extra_rows}"] * bool(xs.extra_rows)
    return (
        f"{np.dtype(s.dtype).name}-{s.dims[0]}x{s.dims[1]}-page{s.page_size}-b{s.batch}"
        f"h{s.heads}x{s.pages_per_seq}-{'-'.join(flags)}"
    )


@pytest.mark.parametrize(
    "index, xs, examples",
    [
        (i, xs, n)
        for i, (xs, n) in enumerate(zip(XLA_SHAPES, shares(XLA_EXAMPLES, len(XLA_SHAPES))))
    ],
    ids=[xla_shape_id(xs) for xs in XLA_SHAPES],
)
def test_xla_backend(request, index, xs, examples):
    """One shape's share of the xla problems: its compilations stay in this item."""
    s = xs.shape
    lora = s.dims[0]

    @settings(FUZZ, max_examples=examples)
    @given(data=st.data())
    def check(data):
        case = data.draw(problems(s), label="problem")
        # The split count follows max_seq_len, not the lengths: any count partitions a
        # row. None takes it from seq_lens; an array reuses one executable for every
        # count; a static one compiles once per value, so only two values per shape.
        max_seq_len = data.draw(
            st.one_of(
                st.none(),
                st.integers(0, MAX_MODEL_LEN + 600).map(jnp.int32),
                st.sampled_from([s.capacity, MAX_MODEL_LEN]),
            ),
            label="max_seq_len",
        )
        buffer = mla_jax.reserve_logits_buffer(
            s.batch + xs.extra_rows,
            s.heads,
            MAX_MODEL_LEN,
            kv_lora_rank=lora,
            rope_dim=s.dims[1],
            sm_count=SM,
            policy=xs.policy,
        )
        q = jnp.asarray(case.q)
        out, lse, _ = mla_jax.mla_decode(
            (q[..., :lora], q[..., lora:]) if xs.pair else q,
            *(jnp.asarray(a) for a in case[1:4]),
            buffer,
            scale=case.scale,
            max_seq_len=max_seq_len,
            backend="xla",
        )
        assert_matches_reference(case, out, lse)

    run_seeded(request, index, check)


@st.composite
def interpreter_shapes(draw) -> Shape:
    """Free shapes; DeepSeek dims (1 in 9) on shorter rows, to bound interpreter time."""
    dims = draw(st.sampled_from([(16, 16), (16, 32), (32, 16), (32, 32)] * 2 + [DEEPSEEK]))
    page_size = draw(st.sampled_from([1, 2, 16, 64]))
    max_tokens = 256 if dims == DEEPSEEK else 640
    return Shape(
        dims,
        draw(st.sampled_from([f32, f16])),
        page_size,
        batch=draw(st.integers(1, 4)),
        heads=draw(st.sampled_from([1, 3, 16, 20])),
        pages_per_seq=draw(st.integers(1, max(1, max_tokens // page_size))),
    )


@pytest.mark.interpreter
@pytest.mark.parametrize(
    "index, examples",
    list(enumerate(shares(INTERPRETER_EXAMPLES, INTERPRETER_SHARDS))),
    ids=[f"shard{i}" for i in range(INTERPRETER_SHARDS)],
)
def test_interpreted_kernels(request, pool, index, examples):
    @settings(FUZZ, max_examples=examples)
    @given(data=st.data())
    def check(data):
        jobs = []
        for _ in range(CASES_PER_CALL):  # submitted together, run over the pool's workers
            s = data.draw(interpreter_shapes(), label="shape")
            case = data.draw(problems(s), label="problem")
            # Any count, not only powers of two.
            num_splits = data.draw(st.integers(1, 8), label="num_splits")
            grid_splits = num_splits + data.draw(st.integers(0, 2), label="idle splits")
            rows = s.batch + data.draw(st.integers(0, 2), label="extra rows")
            buffer = np.full((rows, s.heads, grid_splits, s.dims[0] + 1), np.nan, np.float32)
            # Inside NaN-poisoned allocations (the cache between NaN pages, the table
            # between rows pointing past the pool): a read outside either shows up.
            poison = data.draw(st.sampled_from([0, 2]), label="poison")
            job = pool.apply_async(
                run,
                (*case[:4], buffer),
                dict(
                    scale=case.scale,
                    num_splits=num_splits,
                    grid_splits=grid_splits,
                    poison=poison,
                ),
            )
            jobs.append((case, num_splits, job))
        for case, num_splits, job in jobs:
            out, lse, buf = job.get(timeout=300)  # a crashed worker never answers
            assert_matches_reference(case, out.astype(case.q.dtype), lse)
            # Stage 1 writes only live rows and the first num_splits splits.
            batch = case.q.shape[0]
            assert np.isnan(buf[batch:]).all() and np.isnan(buf[:, :, num_splits:]).all()

    run_seeded(request, len(XLA_SHAPES) + index, check)
