"""decode_loop: one compilation across split counts, numbers against a Python loop
of naive attention steps, and the donated state updated in place."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mla_jax.layer import PRESETS, init_params, naive_mla_attention
from mla_jax.loop import decode_loop, init_decode_state
from mla_jax.splits import num_kv_splits

SM = 132
TINY = PRESETS["tiny"]
LAYERS, PAGE, STEPS = 2, 16, 8
naive = jax.jit(naive_mla_attention, static_argnames=("config",))


def _rms(x):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + TINY.rms_norm_eps)


def _dense(state):
    """Per layer ``[B, capacity, D]`` numpy copies of the caches, in token order."""
    table = np.array(state.block_table)
    return [np.array(c)[table].reshape(table.shape[0], -1, c.shape[-1]) for c in state.kv_caches]


def _python_loop(params_list, x0, histories, positions):
    """The same model, one naive (non-absorbed) layer call at a time."""
    x, outputs, batch = np.asarray(x0), [], len(positions)
    for _ in range(STEPS):
        h = x
        for params, history in zip(params_list, histories):
            attn, row = naive(
                params, TINY, jnp.asarray(_rms(h)), jnp.asarray(history), jnp.asarray(positions)
            )
            history[np.arange(batch), positions] = row
            h = h + np.asarray(attn)
        outputs.append(h)
        x, positions = _rms(h), positions + 1
    return np.stack(outputs)


def test_one_compilation_across_split_counts():
    """Three scans whose longest sequence crosses 1024, 1536 and 2560 tokens (split
    counts 1->2, 2->4, 4->8), all served by one executable."""
    params_list = [init_params(TINY, k) for k in jax.random.split(jax.random.key(0), LAYERS)]
    max_len = 2600
    size_before = decode_loop._cache_size()
    for i, prompt_lens in enumerate([[1020, 700], [1100, 1530], [2555, 2000]]):
        state = init_decode_state(
            TINY,
            LAYERS,
            2,
            max_len,
            PAGE,
            sm_count=SM,
            key=jax.random.key(10 + i),
            prompt_lens=prompt_lens,
            policy="vllm",
        )
        x0 = jax.random.normal(jax.random.key(20 + i), (2, TINY.hidden_size))
        histories = _dense(state)
        first, last = max(prompt_lens) + 1, max(prompt_lens) + STEPS
        assert num_kv_splits(first, SM) < num_kv_splits(last, SM)  # the scan crosses a boundary

        outputs, state = decode_loop(params_list, TINY, x0, state, STEPS, backend="xla")
        want = _python_loop(params_list, x0, histories, np.asarray(prompt_lens, np.int32))
        assert outputs.shape == (STEPS, 2, TINY.hidden_size)
        for step in range(STEPS):
            np.testing.assert_allclose(
                outputs[step],
                want[step],
                rtol=1e-4,
                atol=1e-4 * np.abs(want[step]).max(),
                err_msg=f"scan {i}, step {step}",
            )
        for got, history in zip(_dense(state), histories):
            np.testing.assert_allclose(got, history, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(state.positions, np.asarray(prompt_lens) + STEPS)
        # The last step wrote exactly its run-time split count of buffer slots; the
        # rest keep the reservation's NaN.
        written = ~np.isnan(np.asarray(state.logits_buffer.data)).all(axis=(0, 1, 3))
        assert written.sum() == num_kv_splits(last, SM) and written[: written.sum()].all()
    assert decode_loop._cache_size() == size_before + 1


def test_state_updated_in_place():
    params_list = [init_params(TINY, k) for k in jax.random.split(jax.random.key(1), LAYERS)]
    state = init_decode_state(
        TINY, LAYERS, 3, 200, PAGE, sm_count=SM, key=jax.random.key(2), prompt_lens=[3, 90, 150]
    )
    x = jax.random.normal(jax.random.key(3), (3, TINY.hidden_size))

    def pointers(s):
        return [c.unsafe_buffer_pointer() for c in s.kv_caches] + [
            s.logits_buffer.data.unsafe_buffer_pointer()
        ]

    before = pointers(state)
    for call in range(3):
        old = state
        outputs, state = decode_loop(params_list, TINY, x, state, 4, backend="xla")
        assert all(c.is_deleted() for c in old.kv_caches) and old.logits_buffer.data.is_deleted()
        assert pointers(state) == before, f"call {call}"
        assert np.isfinite(np.asarray(outputs)).all()
        x = outputs[-1]
    np.testing.assert_array_equal(state.positions, [15, 102, 162])


def test_init_checks():
    with pytest.raises(
        ValueError,
        match=r"prompt_lens: got int64\[2\] \[5, 64\], needed 2 ints "
        r"in \[0, max_len=64\)",
    ):
        init_decode_state(
            TINY,
            1,
            2,
            64,
            PAGE,
            sm_count=SM,
            key=jax.random.key(0),
            prompt_lens=np.asarray([5, 64], np.int64),
        )
    with pytest.raises(ValueError, match="num_layers must be a positive int, got 0"):
        init_decode_state(
            TINY, 0, 2, 64, PAGE, sm_count=SM, key=jax.random.key(0), prompt_lens=[1, 2]
        )


def test_unrolled_scan_gives_the_same_steps():
    params_list = [init_params(TINY, k) for k in jax.random.split(jax.random.key(4), LAYERS)]
    x = jax.random.normal(jax.random.key(5), (2, TINY.hidden_size))
    results = []
    for unroll in (1, 3):  # 3 does not divide the 8 steps: a remainder trip too
        state = init_decode_state(
            TINY, LAYERS, 2, 300, PAGE, sm_count=SM, key=jax.random.key(6), prompt_lens=[40, 250]
        )
        outputs, state = decode_loop(
            params_list, TINY, x, state, STEPS, backend="xla", unroll=unroll
        )
        results.append((np.asarray(outputs), [np.asarray(c) for c in state.kv_caches]))
    (out1, caches1), (out3, caches3) = results
    np.testing.assert_allclose(out3, out1, rtol=1e-5, atol=1e-5)
    for a, b in zip(caches3, caches1):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
