"""The Triton path (``mla_jax._launch``) lowered for CUDA on a machine without a GPU.

Lowering compiles both Triton kernels for sm_90 (PTX and cubin), so this proves the
kernels build for Hopper in every dtype, and that the lowered step aliases the
logits buffer from its operand to its result and marks it donated.
"""

import re

import jax
import jax.numpy as jnp
import pytest
from jax import export

import mla_jax
from tests.cases import buffer_spec
from tests.kernel_calls import DISABLED, kernel_calls


def lowered_text(
    dtype, *, heads, max_seq_len, pair=False, batch=4, rows=8, policy="vllm", batch_invariant=False
):
    lora, rope, page, pages = 512, 64, 64, 32
    spec = jax.ShapeDtypeStruct
    q = (
        (spec((batch, heads, lora), dtype), spec((batch, heads, rope), dtype))
        if pair
        else spec((batch, heads, lora + rope), dtype)
    )
    args = (
        q,
        spec((batch * pages, page, lora + rope), dtype),
        spec((batch, pages), jnp.int32),
        spec((batch,), jnp.int32),
        buffer_spec(rows, heads, 16, policy=policy),
    )

    def step(q, kv, bt, sl, buf):
        return mla_jax.mla_decode(
            q,
            kv,
            bt,
            sl,
            buf,
            scale=0.1,
            max_seq_len=max_seq_len,
            batch_invariant=batch_invariant,
            backend="triton",
            compute_capability=90,
        )

    exported = export.export(
        jax.jit(step, donate_argnums=4), platforms=["cuda"], disabled_checks=DISABLED
    )(*args)
    return exported.mlir_module()


def stages(text):
    """Which stage each kernel launch in the module is (``mla_decode_stage1``...)."""
    return [c.stage for c in kernel_calls(text)]


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("heads", [16, 128])
@pytest.mark.parametrize("batch", [4, 40])
def test_both_kernels_compile_for_sm90_and_buffer_is_aliased(dtype, heads, batch):
    text = lowered_text(dtype, heads=heads, max_seq_len=4096, batch=batch, rows=batch + 4)
    calls = kernel_calls(text)
    assert stages(text) == ["mla_decode_stage1", "mla_decode_stage2"]
    # Stage 1's operand 7 is the logits buffer (the main function's last argument),
    # aliased to its only result.
    assert len(calls[0].operands) == 8 and calls[0].operands[7] == "%arg4"
    assert calls[0].aliases == [7]
    assert calls[1].aliases == []  # stage 2's outputs are fresh
    main = next(ln for ln in text.splitlines() if "func.func public @main" in ln)
    assert re.search(
        rf"%arg4: tensor<{batch + 4}x\d+x16x513xf32> \{{[^}}]*tf.aliasing_output = 2", main
    )


@pytest.mark.parametrize("heads", [16, 128])
def test_one_split_is_stage_1_alone_writing_the_output(heads):
    """Where the grid has one split (a static length at B=128, H=128 under the
    occupancy rule; batch-invariant mode at any shape), the step lowers one kernel:
    stage 1, its logits buffer operand aliased to its first result as with two stages
    (so consecutive calls stay ordered), and out (q's dtype) and lse its other two."""
    batch_invariant, batch = heads == 16, 128
    text = lowered_text(
        jnp.float16,
        heads=heads,
        max_seq_len=None if batch_invariant else 2048,
        batch=batch,
        rows=batch,
        policy="occupancy",
        batch_invariant=batch_invariant,
    )
    (call,) = kernel_calls(text)
    assert stages(text) == ["mla_decode_stage1"]
    assert len(call.operands) == 8 and call.operands[7] == "%arg4" and call.aliases == [7]
    # The seesaw's (H=128) last result is the global scratch of its TMA descriptors,
    # two of 128 bytes a program over 2 head tiles x 128 rows.
    scratch = ", tensor<65536xui8>" if heads == 128 else ""
    results = (
        rf"-> \(tensor<{batch}x{heads}x16x513xf32>, tensor<{batch}x{heads}x512xf16>, "
        rf"tensor<{batch}x{heads}xf32>{scratch}\)"
    )
    assert re.search(results, call.line), call.line
    main = next(ln for ln in text.splitlines() if "func.func public @main" in ln)
    assert re.search(rf"tensor<{batch}x{heads}x16x513xf32> \{{[^}}]*tf.aliasing_output = 2", main)


def test_seesaw_rows_of_two_splits_are_clusters_that_write_the_output():
    """At H=128 (the seesaw) a row of 2 splits (vLLM's rule at L=1024) lowers one
    kernel: stage 1 launched as clusters of 2 CTAs along x, 2 head tiles of a cluster
    each (4 programs) x 4 rows; it writes out and lse (the buffer, aliased as
    with two stages, carries the partials the pair exchanges). At 4 splits stage 2
    still merges."""
    text = lowered_text(jnp.bfloat16, heads=128, max_seq_len=1024)
    (call,) = kernel_calls(text)
    assert stages(text) == ["mla_decode_stage1"]
    assert len(call.operands) == 8 and call.operands[7] == "%arg4" and call.aliases == [7]
    assert (call.cluster, call.grid) == (2, (4, 4, 1))
    results = r"-> \(tensor<8x128x16x513xf32>, tensor<4x128x512xbf16>, tensor<4x128xf32>"
    assert re.search(results, call.line)
    four = lowered_text(jnp.bfloat16, heads=128, max_seq_len=2048)
    assert stages(four) == ["mla_decode_stage1", "mla_decode_stage2"]


@pytest.mark.parametrize(
    "heads, stage1_name, lse_stores",
    [(16, "mla_decode_stage1", 1), (128, "mla_decode_stage1_gluon_seesaw", 2)],
)
def test_stage_1_and_stage_2_agree_on_the_partials_dtype(
    heads, stage1_name, lse_stores, ptx_in_calls
):
    """With 4 splits (vLLM's rule at L=2048) stage 1 writes partials for stage 2, the
    tl kernel at H=16 and the seesaw at H=128: for a bf16 q in bf16
    (``kernels.bf16_partials``), so stage 1 has half a float32 build's global stores
    of partials (those of a fp16 q; besides them, ``lse_stores`` of the lse a
    thread) and stage 2 widens what it reads (``cvt.f32.bf16``); for an fp16 q,
    float32, widened by neither."""
    stores, widens = {}, {}
    for dtype in (jnp.bfloat16, jnp.float16):
        text = lowered_text(dtype, heads=heads, max_seq_len=2048)
        stage1, stage2 = kernel_calls(text)
        assert (stage1.kernel_name, stage2.kernel_name) == (stage1_name, "mla_decode_stage2")
        stores[dtype] = len(re.findall(r"\bst\.global\.", stage1.ptx.decode()))
        widens[dtype] = "cvt.f32.bf16" in stage2.ptx.decode()
    assert stores[jnp.float16] - lse_stores == 2 * (stores[jnp.bfloat16] - lse_stores), stores
    assert widens == {jnp.bfloat16: True, jnp.float16: False}


def test_runtime_split_count_and_query_pair_lower():
    text = lowered_text(jnp.bfloat16, heads=16, max_seq_len=None, pair=True)
    assert stages(text) == ["mla_decode_stage1", "mla_decode_stage2"]
    # q_nope and q_pe go to the kernel as two operands: no concatenation.
    assert kernel_calls(text)[0].operands[:2] == ["%arg0", "%arg1"]
    assert "stablehlo.concatenate" not in text


def test_decode_step_donates_the_buffer():
    spec = jax.ShapeDtypeStruct
    step = jax.jit(
        lambda q, kv, bt, sl, buf: mla_jax.mla_decode(
            q, kv, bt, sl, buf, scale=0.1, max_seq_len=256, backend="triton", compute_capability=90
        ),
        donate_argnums=4,
    )
    traced = step.trace(
        spec((2, 16, 576), jnp.bfloat16),
        spec((8, 64, 576), jnp.bfloat16),
        spec((2, 4), jnp.int32),
        spec((2,), jnp.int32),
        buffer_spec(2, 16, 2),
    )
    text = traced.lower(lowering_platforms=("cuda",)).as_text()
    main = next(ln for ln in text.splitlines() if "func.func public @main" in ln)
    assert re.search(r"tensor<2x16x2x513xf32> \{[^}]*tf.aliasing_output = 2", main)


@pytest.mark.parametrize(
    "policy, batch, heads, want",
    [("occupancy", 64, 16, 2), ("occupancy", 1, 128, 64), ("vllm", 64, 16, 16)],
)
def test_runtime_split_grid_is_the_batch_bound(policy, batch, heads, want):
    """A step whose length is known only at run time launches the most splits its
    batch can ask for (``splits.max_kv_splits``), not the buffer's whole split axis:
    stage 1's grid is ``(head blocks, batch, grid splits)`` in the exported module. On
    sm_90 at 16 heads on the occupancy rule that is the 16-bit 16-head Gluon kernel,
    at half of it (4 splits of the 256-token capacity: 2 of 128;
    ``plan.gluon_split_divisor``)."""
    spec = jax.ShapeDtypeStruct
    # Reserved splits: vLLM's rule at L=8192, or more than occupancy ever asks for.
    buf = buffer_spec(batch, heads, {"vllm": 16, "occupancy": 256}[policy], policy=policy)

    def step(q, kv, bt, sl, b):
        return mla_jax.mla_decode(
            q, kv, bt, sl, b, scale=0.1, backend="triton", compute_capability=90
        )

    text = export.export(jax.jit(step), platforms=["cuda"], disabled_checks=DISABLED)(
        spec((batch, heads, 576), jnp.bfloat16),
        spec((batch * 4, 64, 576), jnp.bfloat16),
        spec((batch, 4), jnp.int32),
        spec((batch,), jnp.int32),
        buf,
    ).mlir_module()
    assert stages(text) == ["mla_decode_stage1", "mla_decode_stage2"]
    stage1_grid = kernel_calls(text)[0].grid
    assert stage1_grid[1:] == (batch, want), stage1_grid


@pytest.mark.parametrize(
    "batch, heads, length, grid",
    [
        (16, 32, 1024, (2, 16, 4)),  # 16384 tokens: the rule's 8 splits halved
        (1, 32, 1024, (2, 1, 16)),  # 32 programs at the rule's 16: one wave already
        (4, 32, 16384, (1, 4, 32)),  # 65536 tokens: one 32-head tile, the rule's 32 splits
        (4, 64, 1024, (2, 4, 16)),  # two 32-head tiles at the rule's 16 (16-head tiles)
        (8, 64, 2048, (2, 8, 8)),  # 16384 tokens: the rule's 16 (a 64-head tile) halved
        (1, 128, 4096, (4, 1, 32)),  # four 32-head tiles at the rule's 32
    ],
)
def test_stage1_grid_of_the_16_bit_16_head_kernel_in_wide_heads(batch, heads, length, grid):
    """On sm_90 at 32, 64 and 128 heads with a static ``max_seq_len`` the 16-bit 16-head
    Gluon kernel runs in small steps: at 32 heads two 16-head tiles a row in a step of
    at most ``SMALL_HEADS_BATCH_TOKENS`` tokens and one 32-head tile in a larger one, at
    64 heads two 32-head tiles up to ``SMALL_HEADS_BATCH_TOKENS``, at 128 four up to
    ``WIDE_HEADS_BATCH_TOKENS``; at half the occupancy rule's splits where its grid
    would take twice the waves the rule planned (``plan.gluon_split_divisor``),
    else at the rule's count."""
    spec = jax.ShapeDtypeStruct

    def step(q, kv, bt, sl, b):
        return mla_jax.mla_decode(
            q,
            kv,
            bt,
            sl,
            b,
            scale=0.1,
            max_seq_len=length,
            backend="triton",
            compute_capability=90,
        )

    pages = length // 64
    text = export.export(jax.jit(step), platforms=["cuda"], disabled_checks=DISABLED)(
        spec((batch, heads, 576), jnp.bfloat16),
        spec((batch * pages, 64, 576), jnp.bfloat16),
        spec((batch, pages), jnp.int32),
        spec((batch,), jnp.int32),
        buffer_spec(batch, heads, 256, policy="occupancy"),
    ).mlir_module()
    assert stages(text) == ["mla_decode_stage1", "mla_decode_stage2"]
    stage1 = kernel_calls(text)[0]
    assert stage1.kernel_name == "mla_decode_stage1_gluon_h16"
    assert stage1.grid == grid


@pytest.mark.parametrize(
    "batch, heads, length, max_seq_len, batch_invariant, tile, splits, page",
    [
        # Pages of 16 tokens: a Gluon kernel takes 64-token pages where the splits hold 64
        # tokens or more (``plan.gluon_split_divisor``), so the tl kernel's
        # tile shows only on other pages.
        (1, 128, 4096, 4096, False, 16, 32, 16),  # 4096 tokens: 16-head tiles, 32 splits
        (1, 128, 1024, 1024, False, 16, 16, 16),  # one split per 64 tokens
        (2, 128, 2048, 2048, False, 16, 16, 16),
        (1, 64, 4096, 4096, False, 16, 64, 16),
        (4, 128, 4096, 4096, False, 64, 16, 16),  # 16384 tokens: the default
        (1, 128, 4096, None, False, 64, 64, 64),  # length known only at run time
        (1, 128, 1024, 1000, True, 64, 1, 16),  # batch-invariant: the tile never follows B
        (1, 16, 4096, 4096, False, 16, 64, 64),  # H=16: 16-head tiles anyway, as before
    ],
)
def test_head_tile_is_chosen_at_trace_time(
    batch, heads, length, max_seq_len, batch_invariant, tile, splits, page, ptx_in_calls
):
    """A static ``max_seq_len`` whose batch holds at most ``SMALL_BATCH_TOKENS`` tokens
    lowers the tl stage 1 with 16-head tiles (``_tiling.head_tile``), 4 warps and
    mma.sync, on the grid the occupancy rule plans for them, in a buffer reserved the
    usual way; otherwise the default tile (64 heads above H=32: 8 warps, warpgroup
    MMA)."""
    from mla_jax.splits import reserved_splits

    reserved = reserved_splits("occupancy", num_heads=heads, max_model_len=length, sm_count=132)

    def step(q, kv, bt, sl, buf):
        return mla_jax.mla_decode(
            q,
            kv,
            bt,
            sl,
            buf,
            scale=0.1,
            max_seq_len=max_seq_len,
            batch_invariant=batch_invariant,
            backend="triton",
            compute_capability=90,
        )

    spec = jax.ShapeDtypeStruct
    args = (
        spec((batch, heads, 576), jnp.bfloat16),
        spec((batch * length // page, page, 576), jnp.bfloat16),
        spec((batch, length // page), jnp.int32),
        spec((batch,), jnp.int32),
        buffer_spec(batch, heads, reserved, policy="occupancy"),
    )
    text = jax.jit(step, donate_argnums=4).trace(*args).lower(lowering_platforms=("cuda",))
    calls = kernel_calls(text.as_text())
    # One split: stage 1 writes the output, no stage 2.
    names = ["mla_decode_stage1", "mla_decode_stage2"][: 1 if splits == 1 else 2]
    assert [c.kernel_name for c in calls] == names
    stage1 = calls[0]
    assert stage1.grid == (-(-heads // tile), batch, splits)
    assert splits <= reserved
    assert stage1.num_warps == (4 if tile == 16 else 8)
    ptx = stage1.ptx.decode()
    assert ("wgmma" in ptx) == (tile == 64) and ("mma.sync" in ptx) == (tile == 16)


@pytest.mark.parametrize("heads, mma", [(128, "HGMMA"), (16, "HMMA")])
def test_stage1_sass_uses_the_expected_mma(heads, mma, tmp_path):
    """The sm_90 build of stage 1 (scripts/inspect_kernel.py, the launch route's
    alignment hints): 64-head tiles run on warpgroup MMA (HGMMA), 16-head tiles on mma.sync
    (HMMA), and the latent tiles are loaded asynchronously (LDGSTS, cp.async)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "inspect_kernel.py"
    # A fresh Triton cache keeps the run self-contained (it compiles the build anew).
    env = os.environ | {"TRITON_CACHE_DIR": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, str(script), "--heads", str(heads)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    counts = {k: int(v) for k, v in re.findall(r"\b(HGMMA|HMMA|LDGSTS)=(\d+)", out)}
    other = "HMMA" if mma == "HGMMA" else "HGMMA"
    assert counts[mma] > 0 and counts[other] == 0 and counts["LDGSTS"] > 0, out


@pytest.mark.parametrize(
    "batch, splits, heads, want",
    [
        (128, 1, 128, (8, 1, 512)),
        (128, 2, 16, (4, 2, 512)),
        (64, 4, 16, (2, 4, 512)),
        (16, 4, 128, (2, 4, 512)),
        (4, 16, 128, (1, 8, 512)),
        (1, 64, 128, (1, 16, 256)),
        (1, 16, 16, (1, 16, 128)),
        (1, 128, 16, (1, 32, 128)),
        (128, 1, 2, (1, 1, 512)),
        (64, 3, 20, (2, 4, 512)),
        (1, 1, 1, (1, 1, 128)),
    ],
)
def test_stage2_tiling_columns_then_splits_then_heads(batch, splits, heads, want):
    """Whole rows of columns while the batch's (row, head) pairs alone make enough
    programs, narrower blocks (down to MIN_COL_BLOCK) where they do not; splits fill the
    tile, then heads while the programs stay STAGE2_PROGRAMS. Never more than
    STAGE2_TILE values a tile."""
    from mla_jax import kernels

    tiles = kernels.stage2_tiling(splits, heads, 512, batch)
    assert (tiles["HEAD_BLOCK"], tiles["SPLIT_BLOCK"], tiles["COL_BLOCK"]) == want
    assert tiles["HEAD_BLOCK"] * tiles["SPLIT_BLOCK"] * tiles["COL_BLOCK"] <= kernels.STAGE2_TILE
    programs = batch * -(-heads // tiles["HEAD_BLOCK"]) * (512 // tiles["COL_BLOCK"])
    assert programs >= kernels.STAGE2_PROGRAMS or tiles["HEAD_BLOCK"] == 1


@pytest.mark.parametrize(
    "heads, lora, want", [(16, 512, 4), (16, 32, 2), (16, 16, 1), (128, 512, 1)]
)
def test_latent_chunks_by_tile_and_rank(heads, lora, want):
    """16-head tiles split the latent dims in 4 (each chunk at least a dot's 16 wide);
    64-head tiles keep one chunk."""
    from mla_jax import kernels

    stage1, _ = kernels.launch_params(
        batch=2,
        num_heads=heads,
        num_pages=8,
        page_size=64,
        pages_per_seq=4,
        kv_lora_rank=lora,
        rope_dim=16,
        scale=0.1,
        grid_splits=2,
        q_nope_strides=(heads * (lora + 16), lora + 16, 1),
        q_pe_strides=(heads * (lora + 16), lora + 16, 1),
        qp_offset=lora,
        kv_strides=(64 * (lora + 16), lora + 16, 1),
        block_table_strides=(4, 1),
        buffer_strides=(heads * 2 * (lora + 1), 2 * (lora + 1), lora + 1, 1),
        q_dtype="bfloat16",
    )
    assert stage1["constexprs"]["LORA_CHUNKS"] == want
