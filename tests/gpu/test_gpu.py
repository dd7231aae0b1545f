"""The real Triton path on a CUDA GPU (skipped elsewhere): bf16 and fp16."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mla_jax
from mla_jax import kernels
from mla_jax.reference import mla_decode_reference_np
from tests.cases import (
    DEEPSEEK,
    TINY,
    buffer_spec,
    edge_lengths,
    random_case,
    unpack_bf16_partials,
)

pytestmark = pytest.mark.gpu
REL_TOL = {jnp.bfloat16: 1e-2, jnp.float16: 2e-3}


def on_device(case, dtype):
    """The case's arrays on the GPU in ``dtype``, and the case rounded to it (for references)."""
    q, kv = jnp.asarray(case.q, dtype), jnp.asarray(case.kv_cache, dtype)
    rounded = case._replace(
        q=np.asarray(q.astype(jnp.float32)), kv_cache=np.asarray(kv.astype(jnp.float32))
    )
    return (q, kv, jnp.asarray(case.block_table), jnp.asarray(case.seq_lens)), rounded


def assert_close(out, lse, rounded, dtype):
    ref_out, ref_lse = mla_decode_reference_np(
        *rounded[:4], scale=rounded.scale, kv_lora_rank=rounded.kv_lora_rank
    )
    out = np.asarray(out.astype(jnp.float32), np.float64)
    rel = np.linalg.norm(out - ref_out) / np.linalg.norm(ref_out)
    assert rel < REL_TOL[dtype], rel
    np.testing.assert_allclose(np.asarray(lse), ref_lse, atol=2e-3, rtol=1e-4)
    empty = rounded.seq_lens == 0
    assert np.all(out[empty] == 0) and np.all(np.asarray(lse)[empty] == -np.inf)


def ragged_deepseek_case(rng, batch, heads, length, dtype):
    """DeepSeek dims, pages of 64, ``length`` tokens of capacity; rows of 0, 1, 63,
    64, 65, ``length``, a random and ``length - 1`` tokens (the first ``batch``), the
    rest full, shuffled. Returns the case, its arrays on the device in ``dtype`` and
    the case rounded to it (``on_device``)."""
    lens = [0, 1, 63, 64, 65, length, int(rng.integers(1, length)), length - 1][:batch]
    case = random_case(
        rng,
        batch=batch,
        heads=heads,
        dims=DEEPSEEK,
        page_size=64,
        pages_per_seq=length // 64,
        seq_lens=rng.permutation(lens + [length] * (batch - len(lens))),
    )
    return (case, *on_device(case, dtype))


def skip_unless_sm90():
    from mla_jax import _launch

    if _launch.device_capability() != 90:
        pytest.skip("the Gluon stage 1 kernels are built for sm_90")


def triton_step(case, length, max_seq_len, k_scale=None, **options):
    """``mla_decode`` on the triton backend, jitted with the buffer donated, and the
    kernels its lowering for ``args`` calls: ``(step, kernels(*args))``. ``max_seq_len``:
    ``"static"`` (``length``) or ``"runtime"`` (left out)."""
    from tests.kernel_calls import kernel_calls

    step = jax.jit(
        lambda q, kv, bt, sl, buf: mla_jax.mla_decode(
            q,
            kv,
            bt,
            sl,
            buf,
            scale=case.scale,
            k_scale=k_scale,
            max_seq_len=length if max_seq_len == "static" else None,
            backend="triton",
            **options,
        ),
        donate_argnums=4,
    )

    def kernels(*args):
        text = step.lower(*args).as_text()
        return [c.kernel_name for c in kernel_calls(text)]

    def clusters(*args):
        text = step.lower(*args).as_text()
        return [c.cluster for c in kernel_calls(text)]

    kernels.clusters = clusters

    return step, kernels


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("dims, heads", [(DEEPSEEK, 16), (DEEPSEEK, 128), (TINY, 20)])
@pytest.mark.parametrize("page_size", [1, 16, 64])
@pytest.mark.parametrize("max_seq_len", ["static", "runtime"])
def test_triton_matches_reference(dtype, dims, heads, page_size, max_seq_len, rng):
    pages = 4200 // page_size + 1
    lens = edge_lengths(page_size, pages * page_size)[:6] + [int(rng.integers(1, 4200)), 4200]
    case = random_case(
        rng,
        batch=len(lens),
        heads=heads,
        dims=dims,
        page_size=page_size,
        pages_per_seq=pages,
        seq_lens=rng.permutation(lens),
    )
    args, rounded = on_device(case, dtype)
    buffer = mla_jax.reserve_logits_buffer(
        len(lens) + 3, heads, 8192, kv_lora_rank=dims[0], rope_dim=dims[1]
    )
    length = 4200 if max_seq_len == "static" else None
    out, lse, buffer = mla_jax.mla_decode(
        *args, buffer, scale=case.scale, max_seq_len=length, backend="triton"
    )
    assert out.dtype == dtype and out.shape == (len(lens), heads, dims[0])
    assert_close(out, lse, rounded, dtype)


@pytest.mark.parametrize("heads, batch", [(16, 2), (128, 1)])
def test_triton_many_splits(heads, batch, rng):
    """The default policy's most splits (64 at L=4096): stage 2 merges them in blocks."""
    case = random_case(
        rng,
        batch=batch,
        heads=heads,
        dims=DEEPSEEK,
        page_size=64,
        pages_per_seq=64,
        seq_lens=[4096, int(rng.integers(1, 4096))][:batch],
    )
    args, rounded = on_device(case, jnp.bfloat16)
    buffer = mla_jax.reserve_logits_buffer(batch, heads, 4096)
    out, lse, _ = mla_jax.mla_decode(
        *args, buffer, scale=case.scale, max_seq_len=4096, backend="triton"
    )
    assert_close(out, lse, rounded, jnp.bfloat16)


@pytest.mark.parametrize("max_seq_len", [4096, None])
def test_donated_buffer_is_not_copied(max_seq_len, rng):
    """The compiled step writes the reserved buffer in place: XLA's optimised HLO holds
    no copy of it (a copy of a buffer reserved at the worst case can cost more than
    the decode)."""
    case = random_case(rng, batch=8, heads=16, dims=DEEPSEEK, page_size=64, pages_per_seq=64)
    args, _ = on_device(case, jnp.bfloat16)
    buffer = mla_jax.reserve_logits_buffer(8, 16, 4096)
    step = jax.jit(
        lambda q, kv, bt, sl, buf: mla_jax.mla_decode(
            q, kv, bt, sl, buf, scale=case.scale, max_seq_len=max_seq_len, backend="triton"
        ),
        donate_argnums=4,
    )
    hlo = step.lower(*args, buffer).compile().as_text()
    shape = "f32[" + ",".join(map(str, buffer.shape)) + "]"
    copies = [line.strip() for line in hlo.splitlines() if shape in line and "copy" in line]
    assert not copies, "\n".join(copies)


def test_query_pair_equals_concatenated_query(rng):
    case = random_case(rng, batch=4, heads=16, dims=DEEPSEEK, page_size=64, pages_per_seq=40)
    (q, kv, bt, sl), _ = on_device(case, jnp.bfloat16)
    buf = mla_jax.reserve_logits_buffer(4, 16, 4096)
    out1, lse1, buf = mla_jax.mla_decode(q, kv, bt, sl, buf, scale=case.scale, backend="triton")
    out2, lse2, buf = mla_jax.mla_decode(
        (q[..., :512], q[..., 512:]), kv, bt, sl, buf, scale=case.scale, backend="triton"
    )
    np.testing.assert_array_equal(np.asarray(out1), np.asarray(out2))
    np.testing.assert_array_equal(np.asarray(lse1), np.asarray(lse2))


def test_triton_and_xla_partials_agree(rng):
    case = random_case(
        rng,
        batch=5,
        heads=16,
        dims=DEEPSEEK,
        page_size=64,
        pages_per_seq=40,
        seq_lens=[0, 1, 700, 1900, 2560],
    )
    args, _ = on_device(case, jnp.bfloat16)
    splits = mla_jax.num_kv_splits(2560, 132)
    bufs = {}
    for backend in ("triton", "xla"):
        buf = mla_jax.reserve_logits_buffer(8, 16, 2560, policy="vllm")
        _, _, buf = mla_jax.mla_decode(
            *args, buf, scale=case.scale, max_seq_len=2560, backend=backend
        )
        bufs[backend] = np.asarray(buf.data)
    # The Triton stage 1 (the tl kernel at 16 heads) stores a bf16 q's partials in
    # bf16, two to a float32 slot (kernels.bf16_partials); the XLA backend in float32.
    assert kernels.bf16_partials("bfloat16", splits)
    bufs["triton"] = unpack_bf16_partials(bufs["triton"])
    for b, n in enumerate(case.seq_lens):
        per = -(-int(n) // splits)
        for s in range(splits):
            if s * per < n:
                a, x = bufs["triton"][b, :, s], bufs["xla"][b, :, s]
                rel = np.linalg.norm(a - x) / np.linalg.norm(x)
                assert rel < 1e-2, (b, s, rel)


def test_buffer_stays_in_place_for_100_steps(rng):
    case = random_case(rng, batch=8, heads=128, dims=DEEPSEEK, page_size=64, pages_per_seq=64)
    args, rounded = on_device(case, jnp.bfloat16)
    buf = mla_jax.reserve_logits_buffer(16, 128, 4096)
    pointer = buf.data.unsafe_buffer_pointer()
    for step in range(100):
        out, lse, buf = mla_jax.mla_decode(
            *args, buf, scale=case.scale, max_seq_len=4096, backend="triton"
        )
        assert buf.data.unsafe_buffer_pointer() == pointer, step
    assert_close(out, lse, rounded, jnp.bfloat16)


def test_compiled_step_aliases_buffer_and_allocates_no_copy():
    spec = jax.ShapeDtypeStruct
    buf = buffer_spec(64, 128, 16, policy="vllm", sm_count=132)
    step = jax.jit(
        lambda q, kv, bt, sl, buf: mla_jax.mla_decode(
            q, kv, bt, sl, buf, scale=0.1, max_seq_len=4096, backend="triton"
        ),
        donate_argnums=4,
    )
    compiled = (
        step.trace(
            spec((64, 128, 576), jnp.bfloat16),
            spec((64 * 64, 64, 576), jnp.bfloat16),
            spec((64, 64), jnp.int32),
            spec((64,), jnp.int32),
            buf,
        )
        .lower()
        .compile()
    )
    stats = compiled.memory_analysis()
    buf_bytes = np.prod(buf.shape) * 4
    print(f"memory_analysis: {stats}")
    assert stats.alias_size_in_bytes >= buf_bytes
    assert stats.temp_size_in_bytes < buf_bytes


def test_scan_over_growing_lengths_compiles_once(rng):
    case = random_case(rng, batch=4, heads=16, dims=DEEPSEEK, page_size=64, pages_per_seq=80)
    (q, kv, bt, _), rounded = on_device(case, jnp.bfloat16)
    lengths = jnp.asarray(
        [[n, n // 2, 0, 1] for n in (100, 600, 1100, 2100, 4200, 5000)], jnp.int32
    )

    @jax.jit
    def run(buf):
        def body(buf, seq_lens):
            out, lse, buf = mla_jax.mla_decode(
                q, kv, bt, seq_lens, buf, scale=case.scale, backend="triton"
            )
            return buf, (out, lse)

        return jax.lax.scan(body, buf, lengths)

    _, (outs, lses) = run(mla_jax.reserve_logits_buffer(4, 16, 5120))
    assert run._cache_size() == 1
    for i, seq_lens in enumerate(np.asarray(lengths)):
        assert_close(outs[i], lses[i], rounded._replace(seq_lens=seq_lens), jnp.bfloat16)


@pytest.mark.parametrize("heads", [16, 128])
def test_occupancy_policy_matches_reference(heads, rng):
    case = random_case(
        rng,
        batch=3,
        heads=heads,
        dims=DEEPSEEK,
        page_size=64,
        pages_per_seq=64,
        seq_lens=[4096, 0, int(rng.integers(1, 4096))],
    )
    args, rounded = on_device(case, jnp.bfloat16)
    buf = mla_jax.reserve_logits_buffer(4, heads, 4096, policy="occupancy")
    assert buf.shape[2] == 64  # one split per 64 tokens at batch 1
    for length in (4096, None):
        out, lse, buf = mla_jax.mla_decode(
            *args, buf, scale=case.scale, max_seq_len=length, backend="triton"
        )
        assert_close(out, lse, rounded, jnp.bfloat16)


def test_batch_invariant_rows_are_bitwise_independent(rng):
    case = random_case(
        rng,
        batch=6,
        heads=16,
        dims=DEEPSEEK,
        page_size=64,
        pages_per_seq=64,
        seq_lens=[4096, 1, 0, 2100, 777, 3000],
    )
    (q, kv, bt, sl), rounded = on_device(case, jnp.bfloat16)

    def run(rows):
        buf = mla_jax.reserve_logits_buffer(8, 16, 4096)
        rows = jnp.asarray(rows)
        out, lse, _ = mla_jax.mla_decode(
            q[rows],
            kv,
            bt[rows],
            sl[rows],
            buf,
            scale=case.scale,
            batch_invariant=True,
            backend="triton",
        )
        return np.asarray(out.astype(jnp.float32)), np.asarray(lse)

    alone = [run([r]) for r in range(6)]
    for rows in ([0, 1, 2, 3, 4, 5], [5, 3, 0], [3, 3, 1, 0, 4]):
        out, lse = run(rows)
        for i, r in enumerate(rows):
            np.testing.assert_array_equal(out[i], alone[r][0][0])
            np.testing.assert_array_equal(lse[i], alone[r][1][0])
    full_out, full_lse = run(list(range(6)))
    assert_close(jnp.asarray(full_out), jnp.asarray(full_lse), rounded, jnp.bfloat16)


def test_multi_token_rows_match_reference(rng):
    from mla_jax.multi_token import mla_decode_tokens, token_lengths

    case = random_case(
        rng,
        batch=3,
        heads=16,
        dims=DEEPSEEK,
        page_size=64,
        pages_per_seq=40,
        seq_lens=[2500, 2, 1000],
    )
    (_, kv, bt, sl), rounded = on_device(case, jnp.bfloat16)
    q = jnp.asarray(rng.standard_normal((3, 4, 16, 576)), jnp.bfloat16)
    buf = mla_jax.reserve_logits_buffer(12, 16, 2560)
    out, lse, _ = mla_decode_tokens(
        q, kv, bt, sl, buf, causal=True, scale=case.scale, backend="triton"
    )
    lens = np.asarray(token_lengths(sl, 4, causal=True))
    for t in range(4):
        assert_close(
            out[:, t],
            lse[:, t],
            rounded._replace(q=np.asarray(q[:, t].astype(jnp.float32)), seq_lens=lens[:, t]),
            jnp.bfloat16,
        )


@pytest.mark.parametrize("scheme", ["heads", "batch"])
def test_one_device_mesh_through_triton(scheme, rng):
    from jax.sharding import Mesh

    from mla_jax.sharded import reserve_sharded_logits_buffer, sharded_mla_decode

    case = random_case(
        rng,
        batch=4,
        heads=16,
        dims=DEEPSEEK,
        page_size=64,
        pages_per_seq=40,
        seq_lens=[2500, 0, 1, 1800],
    )
    args, rounded = on_device(case, jnp.bfloat16)
    mesh = Mesh(np.array(jax.devices()[:1]), ("x",))
    buf = reserve_sharded_logits_buffer(mesh, "x", scheme, 4, 16, 2560)
    out, lse, buf = sharded_mla_decode(
        mesh, "x", scheme, *args, buf, scale=case.scale, max_seq_len=2500, backend="triton"
    )
    assert_close(out, lse, rounded, jnp.bfloat16)


@pytest.mark.parametrize("heads", [16, 128])
def test_fp8_cache_matches_reference_on_dequantised_values(heads, rng):
    from mla_jax.cache import quantize_fp8

    case = random_case(
        rng,
        batch=4,
        heads=heads,
        dims=DEEPSEEK,
        page_size=64,
        pages_per_seq=40,
        seq_lens=[2500, 0, 1, 1800],
    )
    (q, kv, bt, sl), rounded = on_device(case, jnp.bfloat16)
    kv8, k_scale = quantize_fp8(kv)
    dequant = np.asarray(kv8.astype(jnp.float32)) * float(k_scale)
    buf = mla_jax.reserve_logits_buffer(4, heads, 2560)
    out, lse, _ = mla_jax.mla_decode(
        q, kv8, bt, sl, buf, scale=case.scale, k_scale=k_scale, backend="triton"
    )
    assert_close(out, lse, rounded._replace(kv_cache=dequant), jnp.bfloat16)


@pytest.mark.parametrize(
    "batch, heads, length, dtype, cache",
    [
        (16, 128, 4096, jnp.bfloat16, "same"),  # 4 splits of 1024 tokens
        (8, 64, 16384, jnp.float16, "same"),
        (4, 96, 16384, jnp.bfloat16, "same"),  # a full 64-head tile and a half-masked one
        (16, 32, 16384, jnp.bfloat16, "same"),  # one half-masked tile: 8 splits of 2048
        (4, 32, 16384, jnp.bfloat16, "same"),  # 32 splits of 512
        (8, 48, 16384, jnp.float16, "same"),
        (16, 128, 4096, jnp.bfloat16, "fp8"),
        (16, 64, 4096, jnp.bfloat16, "fp8"),  # 8 splits of 512
        (4, 128, 4096, jnp.bfloat16, "fp8"),  # 16 splits of 256
        (4, 96, 16384, jnp.float16, "fp8"),
        (16, 16, 4096, jnp.bfloat16, "fp8"),  # the 16-head fp8 kernel: 16 splits of 256
        (4, 16, 4096, jnp.float16, "fp8"),  # 64 splits of 64 tokens
        (8, 20, 16384, jnp.float16, "fp8"),  # a full 16-head tile and a masked one
        (64, 32, 4096, jnp.bfloat16, "fp8"),
        # The 16-bit 16-head kernel, at half the occupancy count where its grid holds
        # more programs than SMs, else at the count:
        (16, 16, 4096, jnp.bfloat16, "same"),  # 8 splits of 512 (the rule's 16)
        (64, 16, 4096, jnp.float16, "same"),  # 2 splits of 2048
        (128, 16, 1024, jnp.bfloat16, "same"),  # 1 split (the rule's 2): no stage 2
        # ... and at 32 heads in a step of at most 16384 tokens (a static max_seq_len;
        # else the seesaw), two tiles a row:
        (16, 32, 1024, jnp.bfloat16, "same"),  # 4 splits of 256 (the rule's 8)
        (4, 32, 4096, jnp.float16, "same"),  # 16 splits of 256 (the rule's 32)
        # ... and in a larger step one 32-head tile a row, at the rule's count:
        (16, 32, 4096, jnp.bfloat16, "same"),  # 8 splits of 512
        (128, 32, 1024, jnp.float16, "same"),  # 1 split: no stage 2
        # ... and at 64 heads up to 16384 tokens two 32-head tiles a row, at 128 up to
        # 4096 four (with a run-time length, at 64 tokens a split, the tl kernel):
        (8, 64, 512, jnp.bfloat16, "same"),  # 8 splits of 64 (the rule's count)
        (8, 64, 2048, jnp.float16, "same"),  # 8 splits of 256 (the rule's 16)
        (8, 128, 512, jnp.bfloat16, "same"),  # 4 splits of 128
        (6, 128, 640, jnp.float16, "same"),  # 4 splits of 160
        # Two splits: a cluster of two CTAs a row, which merges them (no stage 2):
        (64, 64, 1024, jnp.bfloat16, "same"),
        (32, 96, 4096, jnp.float16, "same"),  # a full tile and a half-masked one
        # One split (stage 1 writes the output; no stage 2):
        (128, 128, 1024, jnp.bfloat16, "same"),
        (128, 128, 1024, jnp.float16, "fp8"),
    ],
)
@pytest.mark.parametrize("max_seq_len", ["static", "runtime"])
def test_gluon_stage1_through_mla_decode(batch, heads, length, dtype, cache, max_seq_len, rng):
    """On sm_90, ``mla_decode`` at shapes whose splits are long enough for a Gluon
    kernel (``plan.gluon_split_divisor``) lowers stage 1 to one (the seesaw
    from 32 heads on either cache, the 16-head fp8 kernel under 64 heads on an fp8 one,
    the 16-bit 16-head kernel at 16 heads on a 16-bit one, and with a static
    ``max_seq_len`` at 32 heads, two 16-head tiles a row in a small step, one 32-head
    tile in a larger one, at 64 and 128 heads in a small step 32-head tiles); it
    matches the float64 reference (on the dequantised cache for fp8) on ragged rows: an
    empty row, page edges, a full row. ``runtime`` leaves ``max_seq_len`` out: the block table's
    capacity, ``length``, plans the splits (where they hold under 128 tokens, the tl
    kernel). Where the grid has one split stage 1 writes the output and there is no
    stage 2."""
    from mla_jax.cache import quantize_fp8

    skip_unless_sm90()
    case, (q, kv, bt, sl), rounded = ragged_deepseek_case(rng, batch, heads, length, dtype)
    k_scale = None
    if cache == "fp8":
        kv, k_scale = quantize_fp8(kv)
        dequant = np.asarray(kv.astype(jnp.float32)) * float(k_scale)
        rounded = rounded._replace(kv_cache=dequant)
    buffer = mla_jax.reserve_logits_buffer(batch, heads, length)
    step, kernels = triton_step(case, length, max_seq_len, k_scale)
    names = kernels(q, kv, bt, sl, buffer)
    stage1 = "mla_decode_stage1_gluon_seesaw"
    if cache == "fp8" and heads < 64:
        stage1 = "mla_decode_stage1_gluon_fp8_h16"
    # A run-time length plans the splits with the default head tile.
    splits = int(
        mla_jax.kv_splits(
            buffer.policy,
            batch=batch,
            num_heads=heads,
            max_seq_len=length if max_seq_len == "static" else jnp.int32(length),
            sm_count=buffer.sm_count,
        )
    )
    if -(-length // splits) < 128 and stage1 == "mla_decode_stage1_gluon_seesaw":
        stage1 = "mla_decode_stage1"  # the tl kernel: the seesaw's splits are too short
    # The 16-bit 16-head kernel's tokens a step at 32, 64 and 128 heads, and its tile;
    # it runs one wave, at half the rule's count where that would fill more.
    most_tokens = {32: 16384, 64: 16384, 128: 4096}.get(heads, 0)
    small_step = max_seq_len == "static" and batch * length <= most_tokens
    one_tile = heads == 32 and max_seq_len == "static" and not small_step
    tile = 32 if heads > 32 or one_tile else 16
    # But 32-head tiles, several a row, leave the smallest steps to the tl kernel: where
    # the rule planned 16-head programs two an SM and their grid fits the SMs.
    tl_fits = batch * length <= 4096 and batch * (heads // 16) * splits <= buffer.sm_count
    if heads > 32 and small_step and tl_fits:
        stage1, small_step = "mla_decode_stage1", False
    if cache == "same" and (heads == 16 or small_step or one_tile):
        stage1 = "mla_decode_stage1_gluon_h16"
        if batch * (heads // tile) * splits > buffer.sm_count:
            splits //= 2
    one_split = splits == 1
    # A seesaw's row of 2 splits is one cluster, which merges them (no stage 2).
    cluster = kernels.clusters(q, kv, bt, sl, buffer)[0]
    merged = one_split or cluster > 1
    assert cluster == 1 or stage1 == "mla_decode_stage1_gluon_seesaw", (stage1, cluster)
    assert names == [stage1] + ([] if merged else ["mla_decode_stage2"]), names
    out, lse, _ = step(q, kv, bt, sl, buffer)
    assert_close(out, lse, rounded, dtype)


# fp8_mma=True: q and P rounded to e4m3 (docs/performance.md, "fp8 MMAs": 3.2-4.4e-2 in
# relative norm, the lse up to about 0.1 off, at the shapes of the kernel's check, in git
# at 5f16577: scripts/fp8_mma_check.py).
FP8_MMA_OUT_TOL, FP8_MMA_LSE_TOL = 6e-2, 0.2


@pytest.mark.parametrize(
    "batch, heads, length, dtype",
    [
        (16, 128, 4096, jnp.bfloat16),  # 4 splits of 1024 tokens
        (4, 96, 16384, jnp.float16),  # a full 64-head tile and a half-masked one
        (4, 128, 4096, jnp.bfloat16),  # 16 splits of 256
        (16, 64, 4096, jnp.bfloat16),  # 8 splits of 512
        (128, 128, 1024, jnp.bfloat16),  # one split: stage 1 writes the output
    ],
)
@pytest.mark.parametrize("max_seq_len", ["static", "runtime"])
def test_fp8_mma_through_mla_decode(batch, heads, length, dtype, max_seq_len, rng):
    """``fp8_mma=True`` on an fp8 cache with at least 64 heads lowers stage 1 to the
    fp8-MMA kernel on sm_90; on ragged rows (an empty one, page edges, a full one) it is
    within the bounds its e4m3 q and P allow of the float64 reference on the
    dequantised cache, and an empty row is 0 with lse -inf."""
    from mla_jax.cache import quantize_fp8

    skip_unless_sm90()
    case, (q, kv, bt, sl), rounded = ragged_deepseek_case(rng, batch, heads, length, dtype)
    kv8, k_scale = quantize_fp8(kv)
    dequant = np.asarray(kv8.astype(jnp.float32)) * float(k_scale)
    buffer = mla_jax.reserve_logits_buffer(batch, heads, length)
    step, kernels = triton_step(case, length, max_seq_len, k_scale, fp8_mma=True)
    names = kernels(q, kv8, bt, sl, buffer)
    assert names[0] == "mla_decode_stage1_gluon_fp8_mma", names
    out, lse, _ = step(q, kv8, bt, sl, buffer)
    ref_out, ref_lse = mla_decode_reference_np(
        rounded.q, dequant, *rounded[2:4], scale=case.scale, kv_lora_rank=case.kv_lora_rank
    )
    out = np.asarray(out.astype(jnp.float32), np.float64)
    rel = np.linalg.norm(out - ref_out) / np.linalg.norm(ref_out)
    assert rel < FP8_MMA_OUT_TOL, rel
    live = rounded.seq_lens > 0
    np.testing.assert_allclose(np.asarray(lse)[live], ref_lse[live], atol=FP8_MMA_LSE_TOL)
    assert np.all(out[~live] == 0) and np.all(np.asarray(lse)[~live] == -np.inf)


def test_fp8_mma_non_finite_query_head_is_nan_alone(rng):
    """A NaN in one head's q (or an inf in another's) makes that head's output and lse
    NaN under ``fp8_mma=True`` (its e4m3 scale is its own); the other heads are within
    the fp8-MMA bounds."""
    from mla_jax.cache import quantize_fp8

    skip_unless_sm90()
    case = random_case(
        rng, batch=2, heads=64, dims=DEEPSEEK, page_size=64, pages_per_seq=16, seq_lens=[700, 1024]
    )
    (q, kv, bt, sl), _ = on_device(case, jnp.bfloat16)
    q = q.at[0, 3, 7].set(jnp.nan).at[1, 60, 530].set(jnp.inf)
    kv8, k_scale = quantize_fp8(kv)
    buffer = mla_jax.reserve_logits_buffer(2, 64, 1024)
    out, lse, _ = mla_jax.mla_decode(
        q, kv8, bt, sl, buffer, scale=case.scale, k_scale=k_scale, backend="triton", fp8_mma=True
    )
    out, lse = np.asarray(out.astype(jnp.float32)), np.asarray(lse)
    bad = np.zeros(lse.shape, bool)
    bad[0, 3] = bad[1, 60] = True
    assert np.all(np.isnan(lse[bad])) and np.all(np.isnan(out[bad]))
    assert np.all(np.isfinite(lse[~bad])) and np.all(np.isfinite(out[~bad]))


@pytest.mark.parametrize("kind", ["tl", "gluon"])
def test_global_scratch_reaches_the_kernel(kind, rng):
    """Kernels that make TMA descriptors on the device run through the launch route:
    their global scratch is the call's hidden last result, each of the four programs
    writing its descriptors into its own part of it (``test_kernel_cache``)."""
    from tests.kernels import test_kernel_cache as k

    kernel = k.tma_add_one if kind == "tl" else k.gluon_tma_add_one
    x = jnp.asarray(rng.standard_normal((256, 64)), jnp.float32)
    y = jax.jit(lambda x: k.tma_add_one_call(x, kernel, compute_capability=None))(x)
    np.testing.assert_array_equal(np.asarray(y), np.asarray(x) + np.float32(1))
