"""Inputs that must not hurt: out-of-range lengths and pages, non-finite values.

The documented semantics (``mla_decode``'s docstring), on every backend:

- ``seq_lens`` are clamped to ``[0, pages_per_seq * page_size]``: a negative length is
  an empty row (``out = 0``, ``lse = -inf``), one past the block table's capacity reads
  the capacity, never the next row's entries or memory past the table;
- a live block-table entry outside ``[0, num_pages)`` reads page 0, never memory
  outside the cache;
- a NaN or inf in a live input makes that row's ``lse`` NaN, never ``-inf`` (which
  only marks an empty row); a NaN in a dead cache slot changes nothing.

The interpreted kernels run on inputs placed inside larger NaN-poisoned allocations
(``tests.interpreted.run(poison=...)``), so a read outside the cache or the table turns
the result NaN or wrong instead of passing unseen. ``validate=True`` turns each hazard
into a ValueError instead.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import mla_jax
from mla_jax.reference import mla_decode_reference_np
from tests.cases import TINY, random_case
from tests.interpreted import run

SEED = 20261130
HEADS, PAGE, PAGES = 4, 16, 4
CAPACITY = PAGE * PAGES
SM = 4


def hazards():
    """One problem whose rows each carry one hazard, and the documented answer.

    Row 0: plain. Row 1: a length past the capacity. Rows 2, 3: live entries -1 and
    past the pool. Row 4: a negative length. Row 5: NaN in q. Row 6: NaN in a live
    cache row. Row 7: +inf in q. Row 8: NaN in a dead slot. Row 9 (last): a length past
    the capacity, where reading on would leave the table.
    """
    rng = np.random.default_rng(SEED)
    lens = [37, CAPACITY + 40, 50, 60, -5, 20, 30, 25, 21, CAPACITY + 100]
    case = random_case(
        rng,
        batch=len(lens),
        heads=HEADS,
        dims=TINY,
        page_size=PAGE,
        pages_per_seq=PAGES,
        seq_lens=np.clip(lens, 0, None),
    )
    q, kv, table = case.q.copy(), case.kv_cache.copy(), case.block_table.copy()
    num_pages = kv.shape[0]
    table[2, 1] = -1
    table[3, 2] = num_pages + 1
    q[5, 1, 3] = np.nan
    kv[table[6, 1], 5, 2] = np.nan  # token 21 of row 6: live
    q[7, 2, 0] = np.inf
    kv[table[8, 1], 7, 4] = np.nan  # token 23 of row 8, whose length is 21: dead
    seq_lens = np.asarray(lens, np.int32)
    # What the rows mean: lengths clamped into range, pages outside the pool read page 0.
    want_out, want_lse = mla_decode_reference_np(
        q,
        kv,
        np.where((table >= 0) & (table < num_pages), table, 0),
        np.clip(seq_lens, 0, CAPACITY),
        scale=case.scale,
        kv_lora_rank=TINY[0],
    )
    return case._replace(q=q, kv_cache=kv, block_table=table, seq_lens=seq_lens), (
        want_out,
        want_lse,
    )


NAN_ROWS = (5, 6, 7)


def check(out, lse, want_out, want_lse, atol):
    out, lse = np.asarray(out, np.float64), np.asarray(lse, np.float64)
    for row in NAN_ROWS:
        assert np.isnan(lse[row]).any() and not np.isneginf(lse[row]).any(), (row, lse[row])
        assert np.isnan(out[row]).any(), row
    assert np.isneginf(lse[4]).all() and (out[4] == 0).all()  # the negative length
    ok = [r for r in range(len(lse)) if r not in NAN_ROWS]
    np.testing.assert_allclose(out[ok], want_out[ok], atol=atol, err_msg=f"seed {SEED}")
    np.testing.assert_allclose(lse[ok], want_lse[ok], atol=atol, err_msg=f"seed {SEED}")


@pytest.mark.parametrize("backend", ["xla", pytest.param("triton", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("max_seq_len", [None, CAPACITY, 4 * CAPACITY])
@pytest.mark.parametrize("policy", ["vllm", "occupancy"])
def test_backends_keep_the_documented_semantics(backend, max_seq_len, policy):
    case, (want_out, want_lse) = hazards()
    buf = mla_jax.reserve_logits_buffer(
        len(case.seq_lens),
        HEADS,
        4 * CAPACITY,
        kv_lora_rank=TINY[0],
        rope_dim=TINY[1],
        sm_count=SM,
        policy=policy,
    )
    out, lse, _ = mla_jax.mla_decode(
        *(jnp.asarray(a) for a in case[:4]),
        buf,
        scale=case.scale,
        max_seq_len=max_seq_len,
        backend=backend,
    )
    # On the GPU the float32 dots run on tensor cores (exact IEEE products, another
    # summation order): the tolerance the H200 run was held to.
    check(out, lse, want_out, want_lse, atol=2e-5 if backend == "xla" else 5e-5)


@pytest.mark.interpreter
def test_interpreted_kernels_stay_inside_their_arrays(pool):
    case, (want_out, want_lse) = hazards()
    rows = len(case.seq_lens)
    runs = {
        splits: pool.apply_async(
            run,
            (*case[:4], np.full((rows, HEADS, splits, TINY[0] + 1), np.nan, np.float32)),
            dict(scale=case.scale, num_splits=splits, poison=4),
        )
        for splits in (1, 3)
    }
    for result in runs.values():
        out, lse, _ = result.get(timeout=600)
        check(out, lse, want_out, want_lse, atol=2e-5)


@pytest.mark.parametrize(
    "row, message",
    [
        (1, r"seq_lens\[1\] = 104 exceeds the block table's capacity of 64 tokens"),
        (2, r"block_table\[1, 1\] = -1 is outside \[0, 45\)"),
        (3, r"block_table\[1, 2\] = 46 is outside \[0, 45\)"),
        (4, r"seq_lens\[1\] = -5 is negative"),
    ],
)
def test_validate_names_each_hazard(row, message):
    """Row ``row`` of the hazards, as row 1 of a two-row batch."""
    case, _ = hazards()
    keep = [0, row]
    q, kv, table, lens = case.q[keep], case.kv_cache, case.block_table[keep], case.seq_lens[keep]
    buf = mla_jax.reserve_logits_buffer(
        2, HEADS, CAPACITY, kv_lora_rank=TINY[0], rope_dim=TINY[1], sm_count=SM
    )
    with pytest.raises(ValueError, match=message):
        mla_jax.mla_decode(
            jnp.asarray(q),
            jnp.asarray(kv),
            jnp.asarray(table),
            jnp.asarray(lens),
            buf,
            scale=case.scale,
            backend="xla",
            validate=True,
        )


def test_merge_propagates_nan_and_keeps_empty_as_identity():
    rng = np.random.default_rng(SEED)
    out_a = jnp.asarray(rng.standard_normal((3, 2, 8)), jnp.float32)
    out_b = jnp.asarray(rng.standard_normal((3, 2, 8)), jnp.float32)
    lse_a = jnp.asarray([[0.5, jnp.nan], [jnp.nan, -jnp.inf], [-jnp.inf, 1.0]], jnp.float32)
    lse_b = jnp.asarray([[-jnp.inf, 0.2], [-jnp.inf, -jnp.inf], [0.3, -jnp.inf]], jnp.float32)
    out, lse = mla_jax.merge_attention_states(out_a, lse_a, out_b, lse_b)
    out, lse = np.asarray(out), np.asarray(lse)
    # A NaN lse on either side (not an empty range) makes the merge NaN.
    assert np.isnan(lse[0, 1]) and np.isnan(out[0, 1]).all()
    assert np.isnan(lse[1, 0]) and np.isnan(out[1, 0]).all()
    # Empty on both sides stays empty; empty on one side passes the other through.
    assert lse[1, 1] == -np.inf and (out[1, 1] == 0).all()
    np.testing.assert_allclose(out[0, 0], np.asarray(out_a[0, 0]), rtol=1e-6)
    np.testing.assert_allclose(lse[2], [0.3, 1.0], rtol=1e-6)
    np.testing.assert_allclose(out[2, 1], np.asarray(out_a[2, 1]), rtol=1e-6)


def test_a_nan_shard_never_disappears_in_a_merge():
    """Two shards of one row: the one holding a NaN token must poison the merge, as the
    whole row's decode does, on the xla backend."""
    case, _ = hazards()
    row = 6  # its NaN token is 21, in the second half
    q, kv = jnp.asarray(case.q[row : row + 1]), jnp.asarray(case.kv_cache)
    parts = []
    for lo, hi in ((0, 16), (16, 30)):
        # A shard: the row's tokens [lo, hi) through a table of just their pages.
        sub = jnp.asarray(case.block_table[row : row + 1, lo // PAGE :])
        buf = mla_jax.reserve_logits_buffer(
            1, HEADS, CAPACITY, kv_lora_rank=TINY[0], rope_dim=TINY[1], sm_count=SM
        )
        out, lse, _ = mla_jax.mla_decode(
            q, kv, sub, jnp.asarray([hi - lo], jnp.int32), buf, scale=case.scale, backend="xla"
        )
        parts.append((out, lse))
    assert np.isfinite(np.asarray(parts[0][1])).all() and np.isnan(np.asarray(parts[1][1])).all()
    _, lse = mla_jax.merge_attention_states(*parts[0], *parts[1])
    assert np.isnan(np.asarray(lse)).all()


def test_decode_loop_validates_the_positions_it_will_write():
    """``decode_loop(validate=True)`` checks every position its steps write before
    anything runs: a row that would run past its block table is named, and the state
    (donated only when the loop runs) is left alive."""
    import jax

    from mla_jax.layer import PRESETS, init_params
    from mla_jax.loop import decode_loop, init_decode_state

    tiny = PRESETS["tiny"]
    params = [init_params(tiny, jax.random.key(1))]
    state = init_decode_state(
        tiny, 1, 3, 200, 16, sm_count=SM, key=jax.random.key(2), prompt_lens=[3, 90, 150]
    )
    x = jax.random.normal(jax.random.key(3), (3, tiny.hidden_size))
    capacity = state.block_table.shape[1] * 16
    steps = capacity - 150 + 1  # row 2's last step writes one token past the table
    with pytest.raises(
        ValueError,
        match=rf"seq_lens\[2\] = {capacity + 1} exceeds the "
        rf"block table's capacity of {capacity} tokens",
    ):
        decode_loop(params, tiny, x, state, steps, backend="xla", validate=True)
    assert not state.logits_buffer.data.is_deleted()
    outputs, _ = decode_loop(params, tiny, x, state, steps - 1, backend="xla", validate=True)
    assert np.isfinite(np.asarray(outputs)).all()


def test_layer_validates_its_append_position():
    import jax

    from mla_jax.layer import PRESETS, init_params, mla_decode_layer

    tiny = PRESETS["tiny"]
    params = init_params(tiny, jax.random.key(1))
    kv = jnp.zeros((8, 16, tiny.latent_dim))
    table = jnp.arange(8, dtype=jnp.int32).reshape(2, 4)
    buf = mla_jax.reserve_logits_buffer(
        2,
        tiny.num_heads,
        64,
        kv_lora_rank=tiny.kv_lora_rank,
        rope_dim=tiny.qk_rope_head_dim,
        sm_count=SM,
    )
    x = jax.random.normal(jax.random.key(3), (2, tiny.hidden_size))
    with pytest.raises(
        ValueError,
        match=r"seq_lens\[1\] = 65 exceeds the block table's "
        "capacity of 64 tokens",
    ):
        mla_decode_layer(
            params,
            tiny,
            x,
            kv,
            table,
            jnp.asarray([5, 64], jnp.int32),
            buf,
            backend="xla",
            validate=True,
        )
