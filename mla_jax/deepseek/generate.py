"""``generate``: prefill, then every new token in one jitted decode loop.

The prefill is one jitted call; the decode loop is one ``lax.scan`` inside one
jitted call (one executable for the whole generation, whatever the lengths reached),
with the state (paged caches, block table, logits buffer, positions) donated so the
caches and the buffer are updated in place.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from mla_jax.buffers import reserve_logits_buffer
from mla_jax.decode import Backend
from mla_jax.deepseek.config import DeepseekConfig
from mla_jax.deepseek.model import DeepseekParams, decode_step, prefill
from mla_jax.loop import DecodeState


class GenerateOutput(NamedTuple):
    tokens: jax.Array  # int32 [B, max_new_tokens]
    logits: jax.Array | None  # float32 [B, max_new_tokens, vocab]: what each token came from


def new_decode_state(
    config: DeepseekConfig,
    batch: int,
    max_len: int,
    *,
    page_size: int = 16,
    dtype: jnp.dtype = jnp.bfloat16,
    sm_count: int | None = None,
) -> DecodeState:
    """Empty paged caches for ``batch`` sequences of up to ``max_len`` tokens.

    One cache per layer, ``[batch * pages, page_size, latent_dim]`` zeros in ``dtype``,
    sequence ``b`` on pages ``[b * pages, (b + 1) * pages)``; a logits buffer reserved
    for ``max_len`` with ``sm_count`` (``None`` asks the GPU, or plans for 132 SMs
    without one: ``mla_jax.buffers.gpu_sm_count``); positions 0.
    """
    a = config.attention
    pages = -(-max_len // page_size)
    block_table = jnp.arange(batch * pages, dtype=jnp.int32).reshape(batch, pages)
    shape = (batch * pages, page_size, a.latent_dim)
    return DecodeState(
        kv_caches=tuple(jnp.zeros(shape, dtype) for _ in range(config.num_hidden_layers)),
        block_table=block_table,
        logits_buffer=reserve_logits_buffer(
            batch,
            a.num_heads,
            max_len,
            kv_lora_rank=a.kv_lora_rank,
            rope_dim=a.qk_rope_head_dim,
            sm_count=sm_count,
        ),
        positions=jnp.zeros(batch, jnp.int32),
    )


def _sample(logits, key, step, temperature, top_k):
    if temperature == 0.0:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    logits = logits / temperature
    if top_k is not None:
        kth = lax.top_k(logits, top_k)[0][:, -1:]
        logits = jnp.where(logits < kth, -jnp.inf, logits)
    return jax.random.categorical(jax.random.fold_in(key, step), logits).astype(jnp.int32)


_prefill = jax.jit(
    prefill, static_argnames=("config", "all_logits"), donate_argnames=("kv_caches",)
)


@functools.partial(
    jax.jit,
    static_argnames=(
        "config",
        "num_steps",
        "temperature",
        "top_k",
        "eos_id",
        "backend",
        "return_logits",
        "compute_capability",
    ),
    donate_argnames=("state",),
)
def decode_loop(
    params: DeepseekParams,
    config: DeepseekConfig,
    first_logits: jax.Array,
    state: DecodeState,
    key: jax.Array,
    *,
    num_steps: int,
    temperature: float,
    top_k: int | None,
    eos_id: int | None,
    backend: Backend,
    return_logits: bool,
    compute_capability: int | None = None,
) -> tuple[jax.Array, jax.Array | None, DecodeState]:
    """``num_steps`` tokens from ``first_logits`` (each prompt's last): sample, decode,
    repeat, in one ``lax.scan``; ``state`` is donated.

    Returns:
      tokens int32 ``[B, num_steps]``, the logits each came from (float32
      ``[B, num_steps, vocab]``, or None), and the state.
    """

    def sample(logits, step, done):
        token = _sample(logits, key, step, temperature, top_k)
        if eos_id is not None:
            token = jnp.where(done, eos_id, token)
            done = done | (token == eos_id)
        return token, done

    def body(carry, step):
        logits, state, done = carry
        token, done = sample(logits, step, done)
        next_logits, state = decode_step(
            params,
            config,
            token,
            state,
            backend=backend,
            compute_capability=compute_capability,
        )
        return (next_logits, state, done), (token, logits if return_logits else None)

    done = jnp.zeros(first_logits.shape[0], bool)
    (logits, state, done), (tokens, all_logits) = lax.scan(
        body, (first_logits, state, done), jnp.arange(num_steps - 1)
    )
    last, _ = sample(logits, num_steps - 1, done)
    tokens = jnp.concatenate([tokens, last[None]], axis=0).T
    if return_logits:
        all_logits = jnp.concatenate([all_logits, logits[None]], axis=0).transpose(1, 0, 2)
    return tokens, all_logits, state


def generate(
    params: DeepseekParams,
    config: DeepseekConfig,
    prompts: jax.Array | np.ndarray,
    prompt_lens: jax.Array | np.ndarray,
    max_new_tokens: int,
    *,
    key: jax.Array | None = None,
    temperature: float = 0.0,
    top_k: int | None = None,
    eos_id: int | None = None,
    backend: Backend = "auto",
    return_logits: bool = False,
    page_size: int = 16,
    cache_dtype: jnp.dtype | None = None,
    sm_count: int | None = None,
) -> GenerateOutput:
    """Continues each prompt by ``max_new_tokens`` tokens.

    Args:
      prompts: int ``[B, T]``, right-padded; row ``b``'s prompt is its first
        ``prompt_lens[b]`` tokens.
      prompt_lens: int ``[B]`` in ``[1, T]``.
      max_new_tokens: tokens to generate per row (the caches hold ``T + max_new_tokens``).
      key: a PRNG key, needed when ``temperature > 0``.
      temperature: 0 is greedy (argmax); otherwise logits are divided by it and
        sampled, among the ``top_k`` largest when ``top_k`` is set.
      eos_id: a row that emits it keeps emitting it.
      backend: ``mla_decode``'s backend for the decode steps (``"auto"``: Triton on a
        GPU, XLA elsewhere).
      return_logits: also return the float32 logits each token was chosen from.
      cache_dtype: the paged caches' dtype (the attention dtype); default the
        embedding's.
      sm_count: the multiprocessor count the logits buffer is reserved for (the
        split rule plans with it); ``None`` asks the GPU. Without a GPU, pass it
        (132 for an H200/H100 SXM).

    Returns:
      ``GenerateOutput(tokens int32 [B, max_new_tokens], logits or None)``.
    """
    prompts = jnp.asarray(prompts, jnp.int32)
    lens = np.asarray(prompt_lens)
    if prompts.ndim != 2 or prompts.shape[1] < 1:
        raise ValueError(f"prompts: got shape {list(prompts.shape)}, needed [B, T >= 1]")
    batch, width = prompts.shape
    if (
        lens.shape != (batch,)
        or not np.issubdtype(lens.dtype, np.integer)
        or lens.min() < 1
        or lens.max() > width
    ):
        raise ValueError(
            f"prompt_lens: got {lens.dtype}{list(lens.shape)} {lens.tolist()}, "
            f"needed {batch} ints in [1, {width}]"
        )
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
    if temperature < 0 or (temperature > 0 and key is None):
        raise ValueError(
            f"temperature: got {temperature} with key={key}, needed 0 (greedy) "
            "or a positive temperature with a PRNG key"
        )
    if top_k is not None and not 1 <= top_k <= config.vocab_size:
        raise ValueError(f"top_k: got {top_k}, needed None or in [1, {config.vocab_size}]")
    dtype = params.embed.dtype if cache_dtype is None else jnp.dtype(cache_dtype)
    state = new_decode_state(
        config, batch, width + max_new_tokens, page_size=page_size, dtype=dtype, sm_count=sm_count
    )
    lengths = jnp.asarray(lens, jnp.int32)
    first_logits, caches = _prefill(
        params, config, prompts, lengths, state.kv_caches, state.block_table
    )
    state = state._replace(kv_caches=caches, positions=lengths)
    tokens, logits, _ = decode_loop(
        params,
        config,
        first_logits,
        state,
        jax.random.key(0) if key is None else key,
        num_steps=max_new_tokens,
        temperature=float(temperature),
        top_k=top_k,
        eos_id=eos_id,
        backend=backend,
        return_logits=return_logits,
    )
    return GenerateOutput(tokens, logits)
