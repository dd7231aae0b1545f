"""Several query tokens per request (speculative decoding) on the one-token kernels.

Each (request, token) pair becomes one decode row with its own length: the kernels
already take a length per row, and every row of a request reads the same block
table row, so no kernel changes are needed. Rows past a request's query count, or
with no visible token, get length 0 (``out = 0``, ``lse = -inf``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from mla_jax._checks import check_array, check_row_vector, narrow_int32
from mla_jax.buffers import LogitsBuffer
from mla_jax.decode import mla_decode, split_query
from mla_jax.validate import validate_inputs


def token_lengths(
    seq_lens: jax.Array, num_tokens: int, *, causal: bool, query_lens: jax.Array | None = None
) -> jax.Array:
    """Visible KV length of every query token: int32 ``[B, num_tokens]``.

    ``seq_lens[b]`` counts all of request b's tokens, its ``query_lens[b]`` (default
    ``num_tokens``) query tokens included, which are the last ones. Causal: token t
    sees ``seq_lens[b] - query_lens[b] + t + 1`` tokens (the prefix and query tokens
    0..t); non-causal: all ``seq_lens[b]``. Tokens ``t >= query_lens[b]`` are padding.
    """
    t = jnp.arange(num_tokens, dtype=jnp.int32)[None, :]
    n = (jnp.full_like(seq_lens, num_tokens) if query_lens is None else query_lens)[:, None]
    visible = (
        seq_lens[:, None] - n + t + 1
        if causal
        else jnp.broadcast_to(seq_lens[:, None], (seq_lens.shape[0], num_tokens))
    )
    return jnp.where(t < n, jnp.maximum(visible, 0), 0).astype(jnp.int32)


def mla_decode_tokens(
    q: jax.Array | tuple[jax.Array, jax.Array],
    kv_cache: jax.Array,
    block_table: jax.Array,
    seq_lens: jax.Array,
    logits_buffer: LogitsBuffer,
    *,
    causal: bool = True,
    query_lens: jax.Array | None = None,
    **decode_kwargs,
) -> tuple[jax.Array, jax.Array, LogitsBuffer]:
    """MLA decode of ``T`` query tokens per request.

    Args:
      q: ``[B, T, H, kv_lora_rank + rope_dim]`` or the pair ``(q_nope [B, T, H,
        kv_lora_rank], q_pe [B, T, H, rope_dim])``.
      kv_cache, block_table: as for ``mla_decode`` (``block_table [B, pages]``);
        the cache already holds the query tokens' latent rows.
      seq_lens: int32 ``[B]``, every token of the request, query tokens included.
      logits_buffer: reserved for at least ``B * T`` rows; donated.
      causal: token t sees the prefix and query tokens 0..t; else all ``seq_lens``.
      query_lens: int32 ``[B]`` query tokens per request, each in ``[0, T]`` (a
        ValueError otherwise, where concrete); the rest are padding rows. Default:
        ``T`` each.
      decode_kwargs: ``scale``, ``max_seq_len``, ``backend``, ... of ``mla_decode``
        (``max_seq_len`` bounds every token's length, as for one token).
        ``validate=True`` checks the requests' ``block_table`` and ``seq_lens``, so
        an error names a request, not a flattened (request, token) row.

    Integer arrays wider than int32 are narrowed after checking their values fit.

    Returns:
      ``out [B, T, H, kv_lora_rank]``, ``lse [B, T, H]`` and the logits buffer.
    """
    q_nope, q_pe = split_query(q)
    for name, x in (("kv_cache", kv_cache), ("block_table", block_table), ("seq_lens", seq_lens)):
        check_array(name, x)
    if q_nope.ndim != 4 or (q_pe is not None and q_pe.ndim != 4):
        shapes = [list(q_nope.shape)] + ([] if q_pe is None else [list(q_pe.shape)])
        raise ValueError(
            f"q: got {', '.join(map(str, shapes))}, needed [B, T, H, D] "
            "(use mla_decode for one token per request)"
        )
    batch, tokens = q_nope.shape[:2]
    block_table = narrow_int32("block_table", block_table)
    seq_lens = narrow_int32("seq_lens", seq_lens)
    if block_table.ndim != 2 or block_table.shape[0] != batch:
        raise ValueError(f"block_table: got {list(block_table.shape)}, needed [{batch}, pages]")
    check_row_vector("seq_lens", seq_lens, batch)
    if query_lens is not None:
        check_array("query_lens", query_lens)
        query_lens = narrow_int32("query_lens", query_lens)
        check_row_vector("query_lens", query_lens, batch)
        if not isinstance(query_lens, jax.core.Tracer):
            host = np.asarray(query_lens)
            bad = (host < 0) | (host > tokens)
            if bad.any():
                b = int(np.argmax(bad))
                raise ValueError(
                    f"query_lens[{b}] = {host[b]} is outside [0, T={tokens}] "
                    f"(q is {list(q_nope.shape)})"
                )
    if decode_kwargs.pop("validate", False):
        validate_inputs(kv_cache, block_table, seq_lens)

    def rows(x: jax.Array) -> jax.Array:
        return x.reshape(batch * tokens, *x.shape[2:])

    q_rows = rows(q_nope) if q_pe is None else (rows(q_nope), rows(q_pe))
    lens = token_lengths(seq_lens, tokens, causal=causal, query_lens=query_lens)
    table = jnp.repeat(block_table, tokens, axis=0)  # the request's pages for each token
    out, lse, logits_buffer = mla_decode(
        q_rows, kv_cache, table, lens.reshape(-1), logits_buffer, **decode_kwargs
    )
    return (
        out.reshape(batch, tokens, *out.shape[1:]),
        lse.reshape(batch, tokens, -1),
        logits_buffer,
    )
