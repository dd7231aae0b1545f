"""Runs the Triton kernels under the Triton interpreter with torch CPU tensors.

``TRITON_INTERPRET`` must be set before triton defines any kernel, so the
interpreted runs happen in worker processes started with it set; the test process
keeps the compiled kernels that ``mla_jax._launch`` lowers. Tests submit ``run`` to the
session's ``pool`` fixture (``tests/conftest.py``), an ``interpreter_pool()``.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os

import numpy as np


@contextlib.contextmanager
def interpreter_pool(processes: int = 2):
    """A pool of spawned workers whose triton runs kernels in the interpreter.

    The initializer sets ``TRITON_INTERPRET`` in every worker, a replacement for a
    crashed one included, before the worker imports triton.
    """
    pool = multiprocessing.get_context("spawn").Pool(processes, initializer=_interpret)
    with pool:
        yield pool


def _interpret() -> None:
    os.environ["TRITON_INTERPRET"] = "1"


def _inside_poison(t, pad: int, fill):
    """``t`` as a view into the middle of a larger tensor filled with ``fill``: a read
    up to ``pad`` elements before or after it lands in the poison, not in free memory."""
    import torch

    flat = torch.full((t.numel() + 2 * pad,), fill, dtype=t.dtype)
    flat[pad : pad + t.numel()] = t.reshape(-1)
    return flat[pad : pad + t.numel()].view(t.shape)


def run(
    q: np.ndarray,
    kv_cache: np.ndarray,
    block_table: np.ndarray,
    seq_lens: np.ndarray,
    buffer: np.ndarray,
    *,
    scale: float,
    num_splits: int,
    grid_splits: int | None = None,
    kv_scale: float = 1.0,
    batch_tokens: int | None = None,
    config: dict | None = None,
    poison: int = 0,
    bf16_partials: bool | None = None,
):
    """Both stages on numpy inputs (in a pool worker); returns numpy ``(out, lse, buffer)``.
    With one split (``grid_splits``, else ``num_splits``, of 1) stage 1 alone, which
    writes the output and leaves the buffer as it was.

    ``q`` is ``[B, H, lora + rope]``; ``buffer`` float32 ``[rows, H, splits, lora + 1]``
    keeps its contents where the kernel does not write. Outputs start as NaN.
    ``batch_tokens`` picks the head tile as a static step's would
    (``kernels.launch_params``); ``config`` overrides the stage-1 configuration
    ``kernels.stage1_config`` picks; ``bf16_partials`` overrides the partials' dtype
    ``kernels.bf16_partials`` picks for q's (in both stages: an fp16 q's partials in
    bf16, as a bf16 q's are, without the interpreter's bf16 dots).
    ``poison`` places the cache inside ``poison`` NaN pages on either side and the block
    table inside ``poison`` rows of entries that point just past the pool, so a read
    outside either array turns the output NaN (or wrong) instead of passing unseen.
    """
    import torch

    from mla_jax import kernels

    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("run() belongs in a worker of interpreter_pool()")
    batch, heads, _ = q.shape
    lora = buffer.shape[-1] - 1
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))
    q_t, bt_t, sl_t = t(q), t(block_table), t(seq_lens)
    # numpy has no fp8: an ml_dtypes float8_e4m3fn cache crosses as its bytes.
    kv_t = (
        t(kv_cache.view(np.uint8)).view(torch.float8_e4m3fn)
        if kv_cache.dtype.name == "float8_e4m3fn"
        else t(kv_cache)
    )
    if poison:
        page_elems = kv_t.shape[1] * kv_t.shape[2]
        kv_t = _inside_poison(kv_t, poison * page_elems, float("nan"))
        bt_t = _inside_poison(bt_t, poison * bt_t.shape[1], kv_t.shape[0])
    buf_t = t(buffer.copy())
    ns_t = torch.tensor([num_splits], dtype=torch.int32)
    scale_t = torch.tensor([kv_scale], dtype=torch.float32)
    out_t = torch.full((batch, heads, lora), float("nan"), dtype=q_t.dtype)
    lse_t = torch.full((batch, heads), float("nan"), dtype=torch.float32)
    stage1, stage2 = kernels.launch_params(
        batch=batch,
        num_heads=heads,
        num_pages=kv_cache.shape[0],
        page_size=kv_cache.shape[1],
        pages_per_seq=block_table.shape[1],
        kv_lora_rank=lora,
        rope_dim=q.shape[2] - lora,
        scale=scale,
        grid_splits=grid_splits or num_splits,
        q_nope_strides=q_t.stride(),
        q_pe_strides=q_t.stride(),
        qp_offset=lora,
        kv_strides=kv_t.stride(),
        block_table_strides=bt_t.stride(),
        buffer_strides=buf_t.stride(),
        q_dtype=np.dtype(q.dtype).name,
        batch_tokens=batch_tokens,
        config=config,
    )
    if bf16_partials is not None and stage2 is not None:
        for stage in (stage1, stage2):
            stage["constexprs"]["BF16_PARTIALS"] = bf16_partials
    pointers = kernels.stage1_pointers(stage2 is None, buf_t, out_t, lse_t)
    kernels.mla_decode_stage1[stage1["grid"]](
        q_t, q_t, kv_t, bt_t, sl_t, ns_t, scale_t, **pointers, **stage1["constexprs"]
    )
    if stage2 is not None:
        kernels.mla_decode_stage2[stage2["grid"]](
            buf_t, sl_t, ns_t, out_t, lse_t, **stage2["constexprs"]
        )
    return out_t.float().numpy(), lse_t.numpy(), buf_t.numpy()


def run_stage2(buffer, seq_lens, num_splits, *, grid_splits, bf16_partials):
    """Stage 2 alone on ``buffer`` (float32 ``[B, H, S, LORA + 1]``, the partials as
    stage 1 leaves them: float32, or with ``bf16_partials`` bf16 two to a slot);
    returns float32 ``out`` and ``lse`` (NaN-poisoned before)."""
    import torch

    from mla_jax import kernels

    batch, heads, _, slot = buffer.shape
    lora = slot - 1
    buf_t = torch.from_numpy(np.ascontiguousarray(buffer))
    sl_t = torch.from_numpy(np.ascontiguousarray(seq_lens, dtype=np.int32))
    ns_t = torch.tensor([num_splits], dtype=torch.int32)
    out_t = torch.full((batch, heads, lora), float("nan"), dtype=torch.float32)
    lse_t = torch.full((batch, heads), float("nan"), dtype=torch.float32)
    _, stage2 = kernels.launch_params(
        batch=batch,
        num_heads=heads,
        num_pages=1,
        page_size=int(max(seq_lens.max(), 1)),
        pages_per_seq=1,
        kv_lora_rank=lora,
        rope_dim=0,
        scale=1.0,
        grid_splits=grid_splits,
        q_nope_strides=(heads * lora, lora, 1),
        q_pe_strides=(heads * lora, lora, 1),
        qp_offset=lora,
        kv_strides=(lora, lora, 1),
        block_table_strides=(1, 1),
        buffer_strides=buf_t.stride(),
        q_dtype="bfloat16" if bf16_partials else "float32",
    )
    assert stage2["constexprs"]["BF16_PARTIALS"] == bf16_partials
    kernels.mla_decode_stage2[stage2["grid"]](
        buf_t, sl_t, ns_t, out_t, lse_t, **stage2["constexprs"]
    )
    return out_t.numpy(), lse_t.numpy()


@contextlib.contextmanager
def _bf16_dots():
    """The interpreter's ``tl.dot`` with bfloat16 operands done in float32 while inside.

    The interpreter holds bfloat16 as its uint16 bits and multiplies those; bfloat16 to
    float32 is exact, and a float32 product of two bfloat16 values is too, so the
    float32 dot is what the GPU's bf16 MMA with float32 accumulation computes (up to
    the order of the sums)."""
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    real = builder.create_dot

    def widen(h):
        if h.dtype.scalar != tl.bfloat16:
            return h
        data = interpreter._convert_float(h.data, tl.bfloat16, tl.float32, None)
        return interpreter.TensorHandle(data.view(np.float32), tl.float32)

    builder.create_dot = lambda self, a, b, *rest: real(self, widen(a), widen(b), *rest)
    try:
        yield
    finally:
        builder.create_dot = real


def _torch(a: np.ndarray):
    """A torch CPU tensor of ``a``; an ml_dtypes bfloat16 array crosses as its bits."""
    import torch

    a = np.ascontiguousarray(a)
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def run_moe(
    x, weights, experts, gate, up, down, alignment, config, shared=None, tokens=None, top_k=None
):
    """Both fused-MoE kernels (``mla_jax.moe.kernel``) on numpy inputs, in a pool
    worker. ``alignment``: the ``Alignment`` (numpy) ``config.block_m`` gave, the
    shared experts (``shared``: the shared MLP's ``(gate, up, down)``) already in
    ``experts`` (ids from ``gate.shape[0]``) and ``weights``; or None for one token's
    pairs straight from its routed ``experts`` and ``weights``, the shared experts
    after them (``fused_moe``'s one-token path); ``tokens``: the rows that are tokens
    (None: all), the rest padding; ``top_k``: the experts' columns a token uses, the
    first (None: all). Returns float32 numpy ``(h, out)``,
    the per-pair outputs, each poisoned with NaN before the kernels ran so an
    unwritten row shows."""
    import torch

    from mla_jax.moe import kernel

    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("run_moe() belongs in a worker of interpreter_pool()")
    num_experts, hidden, inter = gate.shape
    n_shared = 0 if shared is None else shared[0].shape[1] // inter
    one_token = alignment is None
    rows, columns = experts.shape
    tokens = rows if tokens is None else tokens
    top_k = columns if top_k is None else top_k
    if one_token:  # the kernels read its experts; pairs and num_padded go unread
        top_k += n_shared
        alignment = (np.asarray(experts, np.int32).reshape(-1),) * 3
    x_t, gate_t, up_t, down_t = map(_torch, (x, gate, up, down))
    s_gate, s_up, s_down = (gate_t, up_t, down_t) if shared is None else map(_torch, shared)
    pairs_t, block_t, padded_t = map(_torch, alignment)
    routing = _torch(np.asarray(weights, np.float32).reshape(-1))
    h = torch.full((tokens * top_k, inter), float("nan"), dtype=x_t.dtype)
    out = torch.full((tokens * top_k, hidden), float("nan"), dtype=x_t.dtype)
    gate_up, down_launch = kernel.launch_params(
        num_pairs=tokens * top_k,
        top_k=top_k,
        num_experts=num_experts,
        hidden=hidden,
        intermediate=inter,
        float32=x.dtype == np.float32,
        config=config,
        shared=n_shared,
        one_token=one_token,
    )
    with _bf16_dots():
        kernel.moe_gate_up[gate_up["grid"]](
            x_t, gate_t, up_t, s_gate, s_up, pairs_t, block_t, padded_t, h,
            **gate_up["constexprs"],
        )  # fmt: skip
        kernel.moe_down[down_launch["grid"]](
            h, down_t, s_down, pairs_t, block_t, padded_t, routing, out,
            **down_launch["constexprs"],
        )  # fmt: skip
    return h.float().numpy(), out.float().numpy()


def run_prefill(q, k, v, lengths, *, scale, config=None):
    """The prefill attention kernel (``mla_jax.prefill.kernel``) on numpy inputs, in a
    pool worker: ``q`` one array or the pair ``(q, q_pe)``, ``k`` one ``[B, T, H, D]``
    array or the pair ``(k_nope, k_pe)``, as ``flash_prefill`` takes them; ``config``
    None for ``default_config``'s. Returns the
    output as float32 numpy, poisoned with NaN before the kernel ran so an unwritten
    row shows."""
    import torch

    from mla_jax.prefill import api, default_config, kernel

    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("run_prefill() belongs in a worker of interpreter_pool()")
    q, q_pe = q if isinstance(q, tuple | list) else (q, None)
    batch, tokens, heads, dim_qk = q.shape
    shared = isinstance(k, tuple | list)
    if shared:
        dim_rope = k[1].shape[-1]
        dim_nope = dim_qk - dim_rope
        keys = [_torch(a) for a in k]
    else:
        dim_nope, dim_rope = api.split_dims(dim_qk)
        keys = [_torch(k)] * 2
    dim_v = v.shape[-1]
    if config is None:
        config = default_config(
            tokens=tokens,
            dim_nope=dim_nope,
            dim_rope=dim_rope,
            dim_v=dim_v,
            itemsize=q.dtype.itemsize,
        )
    q_t, v_t = _torch(q), _torch(v)
    out = torch.full((batch, tokens, heads, dim_v), float("nan"), dtype=q_t.dtype)
    params = kernel.launch_params(
        batch=batch,
        tokens=tokens,
        heads=heads,
        dim_nope=dim_nope,
        dim_rope=dim_rope,
        dim_v=dim_v,
        shared_pe=shared,
        scale=scale,
        float32=q.dtype == np.float32,
        config=config,
        q_pe=q_pe is not None,
    )
    lengths_t = _torch(np.asarray(lengths, np.int32))
    tokens_t = torch.tensor([tokens], dtype=torch.int32)
    with _bf16_dots():
        kernel.flash_prefill_fwd[params["grid"]](
            q_t,
            q_t if q_pe is None else _torch(q_pe),
            *keys,
            v_t,
            lengths_t,
            tokens_t,
            out,
            **params["constexprs"],
        )
    return out.float().numpy()
