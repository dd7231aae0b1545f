"""PyTorch references of MLA decode on the paged latent cache (float32 math).

``mla_decode_dense_torch`` takes one softmax over every live latent row;
``mla_decode_split_kv_torch`` runs the two-stage split-KV algorithm of
``mla_jax.kernels`` (and of vLLM's ``decode_attention_fwd``) in torch ops, with the
same cdiv partition and the same partial layout ``[B, H, splits, kv_lora_rank + 1]``,
so its stage-1 partials can be compared slot by slot with the JAX logits buffer.

torch is an optional dependency: only this module (and what imports it) needs it.
Inputs may live on any torch device; the outputs stay there. The matmuls are float32
(on CUDA that needs TF32 off, torch's default for matmuls).
"""

from __future__ import annotations

import torch

# Shapes shared by every function here:
#   q [B, H, kv_lora_rank + rope_dim], kv_cache [num_pages, page_size, same],
#   block_table int [B, pages_per_seq], seq_lens int [B].


def _gather_rows(
    kv_cache: torch.Tensor, block_table: torch.Tensor, tokens: torch.Tensor
) -> torch.Tensor:
    """float32 latent rows of ``tokens`` (int [B, ...], below the table's capacity): [B, ..., D]."""
    page_size = kv_cache.shape[1]
    batch = block_table.shape[0]
    flat = tokens.reshape(batch, -1)
    pages = torch.gather(block_table.long(), 1, flat // page_size)
    rows = kv_cache[pages, flat % page_size].float()
    return rows.reshape(*tokens.shape, kv_cache.shape[2])


def _safe_softmax_stats(logits: torch.Tensor, live: torch.Tensor):
    """Masked softmax pieces over the last axis: ``(p, m, denom)``; all-masked -> 0s."""
    logits = logits.masked_fill(~live, float("-inf"))
    m = logits.amax(dim=-1)
    m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(logits - m_safe[..., None])  # exp(-inf) = 0 on masked slots
    return p, m_safe, p.sum(dim=-1)


def _normalise(acc: torch.Tensor, m: torch.Tensor, denom: torch.Tensor):
    """``(acc / denom, m + log denom)``, with ``0, -inf`` where ``denom == 0``."""
    nonempty = denom > 0
    ones = torch.ones_like(denom)
    out = torch.where(
        nonempty[..., None],
        acc / torch.where(nonempty, denom, ones)[..., None],
        torch.zeros_like(acc),
    )
    lse = torch.where(
        nonempty,
        m + torch.log(torch.where(nonempty, denom, ones)),
        torch.full_like(m, float("-inf")),
    )
    return out, lse


def mla_decode_dense_torch(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    scale: float,
    kv_lora_rank: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense MLA decode: one softmax over each row's first ``seq_lens[b]`` tokens.

    Returns:
      ``out [B, H, kv_lora_rank]`` in q's dtype and ``lse [B, H]`` float32; rows of
      length 0 give ``out = 0``, ``lse = -inf``.
    """
    capacity = block_table.shape[1] * kv_cache.shape[1]
    tokens = torch.arange(capacity, device=q.device).expand(q.shape[0], capacity)
    rows = _gather_rows(kv_cache, block_table, tokens)  # [B, N, D]
    logits = torch.einsum("bhd,bnd->bhn", q.float(), rows) * scale
    live = (tokens < seq_lens[:, None].long())[:, None, :]  # [B, 1, N]
    p, m, denom = _safe_softmax_stats(logits, live)
    acc = torch.einsum("bhn,bnd->bhd", p, rows[..., :kv_lora_rank])
    out, lse = _normalise(acc, m, denom)
    return out.to(q.dtype), lse


def split_kv_stage1(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    scale: float,
    kv_lora_rank: int,
    num_kv_splits: int,
) -> torch.Tensor:
    """Stage 1: per-split normalised partial output and log-sum-exp.

    Split ``s`` of row ``b`` covers tokens ``[s * per, min((s + 1) * per, len))`` with
    ``per = cdiv(len, num_kv_splits)``, as in vLLM.

    Returns:
      float32 ``[B, H, num_kv_splits, kv_lora_rank + 1]``: the partial output, then
      its log-sum-exp. Empty splits hold ``0, -inf`` (the Triton kernels leave those
      slots unwritten, so compare only splits ``s * per < len``).
    """
    k = num_kv_splits
    lens = seq_lens.long()
    per_split = (lens + k - 1) // k  # [B]
    width = max(1, int(per_split.max()))  # tokens per split, padded to the longest
    offsets = torch.arange(width, device=q.device)
    tokens = torch.arange(k, device=q.device)[None, :, None] * per_split[:, None, None] + offsets
    live = (offsets < per_split[:, None, None]) & (tokens < lens[:, None, None])  # [B, k, W]
    capacity = block_table.shape[1] * kv_cache.shape[1]
    rows = _gather_rows(kv_cache, block_table, tokens.clamp(max=capacity - 1))  # [B, k, W, D]
    logits = torch.einsum("bhd,bswd->bhsw", q.float(), rows) * scale
    p, m, denom = _safe_softmax_stats(logits, live[:, None])
    acc = torch.einsum("bhsw,bswd->bhsd", p, rows[..., :kv_lora_rank])
    part, lse = _normalise(acc, m, denom)
    return torch.cat([part, lse[..., None]], dim=-1)


def split_kv_stage2(
    partials: torch.Tensor, seq_lens: torch.Tensor, *, num_kv_splits: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stage 2: merges the non-empty splits of ``partials [B, H, splits, lora + 1]``.

    Reads only splits ``s < cdiv(len, per_split)``, so unwritten slots are never used.

    Returns:
      float32 ``out [B, H, lora]`` and ``lse [B, H]``; empty rows give ``0, -inf``.
    """
    lens = seq_lens.long()
    per_split = ((lens + num_kv_splits - 1) // num_kv_splits).clamp(min=1)
    live_splits = (lens + per_split - 1) // per_split  # [B]
    splits = torch.arange(partials.shape[2], device=partials.device)
    live = (splits[None, :] < live_splits[:, None])[:, None, :]  # [B, 1, S]
    part_lse = partials[..., -1]
    w, m, denom = _safe_softmax_stats(part_lse, live)
    # Zero dead slots first: an unwritten slot may hold NaN, and NaN * 0 is NaN.
    parts = torch.where(live[..., None], partials[..., :-1], torch.zeros_like(partials[..., :-1]))
    acc = torch.einsum("bhs,bhsd->bhd", w, parts)
    return _normalise(acc, m, denom)


def mla_decode_split_kv_torch(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    scale: float,
    kv_lora_rank: int,
    num_kv_splits: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Both split-KV stages; pass ``mla_jax.splits.num_kv_splits(max_len, sm_count)``
    as ``num_kv_splits`` to use the split count of vLLM and of
    ``mla_decode(..., policy="vllm")``.

    Returns:
      ``out [B, H, kv_lora_rank]`` in q's dtype and ``lse [B, H]`` float32; rows of
      length 0 give ``out = 0``, ``lse = -inf``.
    """
    if num_kv_splits < 1:
        raise ValueError(f"num_kv_splits must be >= 1, got {num_kv_splits}")
    partials = split_kv_stage1(
        q,
        kv_cache,
        block_table,
        seq_lens,
        scale=scale,
        kv_lora_rank=kv_lora_rank,
        num_kv_splits=num_kv_splits,
    )
    out, lse = split_kv_stage2(partials, seq_lens, num_kv_splits=num_kv_splits)
    return out.to(q.dtype), lse
