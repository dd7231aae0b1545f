"""validate_inputs: every bad index caught with its row and value, eagerly and under jit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import checkify

from mla_jax.validate import checked_validate, validate_inputs

NUM_PAGES, PAGE_SIZE, PAGES_PER_SEQ = 40, 16, 8  # capacity 128 tokens
KV = jax.ShapeDtypeStruct((NUM_PAGES, PAGE_SIZE, 48), jnp.float16)
KV_ARRAY = jnp.zeros((NUM_PAGES, PAGE_SIZE, 48), jnp.float16)  # jit takes arrays only


def valid_inputs():
    """Rows of lengths 0, 1, 16, 17, 128 and 50; dead entries hold garbage."""
    rng = np.random.default_rng(0)
    table = rng.integers(0, NUM_PAGES, (6, PAGES_PER_SEQ)).astype(np.int32)  # pages repeat
    seq_lens = np.array([0, 1, 16, 17, 128, 50], np.int32)
    live = -(-seq_lens // PAGE_SIZE)
    garbage = np.array([-1, NUM_PAGES, 2**31 - 1, -(2**31), 912], np.int32)
    for b, n in enumerate(live):
        table[b, n:] = rng.choice(garbage, PAGES_PER_SEQ - n)
    # An append writes at seq_len (row 4 is full: it rewrites its last token), so rows 0
    # and 2 write to the page past their live ones, which must be valid too.
    positions = np.array([0, 1, 16, 17, 127, 50], np.int32)
    table[0, 0] = 3
    table[2, 1] = 5
    return table, seq_lens, positions


def eager(table, seq_lens, positions):
    validate_inputs(KV, table, seq_lens, positions=positions)


def eager_jax(table, seq_lens, positions):
    validate_inputs(
        KV,
        jnp.asarray(table),
        jnp.asarray(seq_lens),
        positions=None if positions is None else jnp.asarray(positions),
    )


def under_jit(table, seq_lens, positions):
    err, _ = checked_validate(KV_ARRAY, table, seq_lens, positions=positions)
    err.throw()


MODES = {
    "eager": (eager, ValueError),
    "eager_jax": (eager_jax, ValueError),
    "jit": (under_jit, checkify.JaxRuntimeError),
}


def with_change(**changes):
    """Valid inputs with ``changes``: ``{"table" | "seq_lens" | "positions": (index, value)}``."""

    def make():
        arrays = dict(zip(("table", "seq_lens", "positions"), valid_inputs()))
        for name, (index, value) in changes.items():
            arrays[name][index] = value
        return arrays.values()

    return make


BAD = {
    "negative_seq_len": (with_change(seq_lens=(2, -3)), r"seq_lens\[2\] = -3 is negative"),
    "seq_len_past_capacity": (
        with_change(seq_lens=(5, 129)),
        r"seq_lens\[5\] = 129 exceeds the block table's capacity of 128 tokens "
        r"\(8 pages x page_size 16\)",
    ),
    "live_page_too_large": (
        with_change(table=((5, 3), 912)),
        r"block_table\[5, 3\] = 912 is outside \[0, 40\) \(live page of row 5, seq_len 50\)",
    ),
    "live_page_negative": (
        with_change(table=((3, 1), -1)),
        r"block_table\[3, 1\] = -1 is outside \[0, 40\) \(live page of row 3, seq_len 17\)",
    ),
    "live_page_equal_to_num_pages": (
        with_change(table=((4, 7), 40)),
        r"block_table\[4, 7\] = 40 is outside \[0, 40\) \(live page of row 4, seq_len 128\)",
    ),
    "negative_position": (with_change(positions=(1, -1)), r"positions\[1\] = -1 is negative"),
    "position_past_capacity": (
        with_change(positions=(4, 128)),
        r"positions\[4\] = 128 is past the block table's capacity of 128 tokens",
    ),
    "position_on_a_bad_page": (
        with_change(positions=(2, 70), table=((2, 4), -7)),  # row 2 has one live page
        r"block_table\[2, 4\] = -7 is outside \[0, 40\) \(the page positions\[2\] = 70 "
        r"writes to\)",
    ),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", BAD)
def test_bad_input_named_with_row_and_value(mode, kind):
    make, message = BAD[kind]
    check, error = MODES[mode]
    with pytest.raises(error, match=message):
        check(*make())


@pytest.mark.parametrize("mode", MODES)
def test_valid_inputs_pass_with_garbage_in_dead_entries(mode):
    check, _ = MODES[mode]
    table, seq_lens, positions = valid_inputs()
    assert (table < 0).any() and (table >= NUM_PAGES).any()
    check(table, seq_lens, positions)
    check(table, seq_lens, None)


@pytest.mark.parametrize("mode", MODES)
def test_first_bad_row_is_reported(mode):
    check, error = MODES[mode]
    table, seq_lens, positions = valid_inputs()
    table[5, 0] = -4
    table[4, 2] = 50
    with pytest.raises(error, match=r"block_table\[4, 2\] = 50 "):
        check(table, seq_lens, positions)


def test_inside_a_jitted_step_with_checkify():
    """The documented pattern: validate inside the step, checkify the step, throw after."""

    def step(kv_cache, block_table, seq_lens):
        validate_inputs(kv_cache, block_table, seq_lens)
        return jnp.take(kv_cache, block_table, axis=0, mode="clip").sum()

    checked = jax.jit(checkify.checkify(step))
    table, seq_lens, _ = valid_inputs()
    err, _ = checked(KV_ARRAY, table, seq_lens)
    err.throw()
    table[1, 0] = 99
    err, _ = checked(KV_ARRAY, table, seq_lens)
    with pytest.raises(checkify.JaxRuntimeError, match=r"block_table\[1, 0\] = 99 .* seq_len 1\)"):
        err.throw()
    assert checked._cache_size() == 1
    with pytest.raises(ValueError, match="checkify"):  # without checkify, jit refuses
        jax.jit(step)(KV_ARRAY, table, seq_lens)


@pytest.mark.parametrize(
    "args, message",
    [
        ((jnp.zeros((4, 16)), np.zeros((2, 3), np.int32), np.zeros(2, np.int32)), "kv_cache"),
        (
            (KV, np.zeros((2, 3), np.float32), np.zeros(2, np.int32)),
            r"block_table: got float32\[2, 3\]",
        ),
        (
            (KV, np.zeros((2, 3), np.int32), np.zeros(3, np.int32)),
            r"seq_lens: got int32\[3\], needed integer \[2\] \(block_table is \[2, 3\]\)",
        ),
    ],
)
def test_shapes(args, message):
    with pytest.raises(ValueError, match=message):
        validate_inputs(*args)


def test_empty_batch():
    validate_inputs(KV, np.zeros((0, 3), np.int32), np.zeros(0, np.int32))
