"""``generate``: text or token ids in, the continuations out, like transformers'.

``generate(model, prompts, max_new_tokens=...)`` takes what ``load_checkpoint``
returns and prompts as strings (with the model's tokenizer), ragged lists of token
ids, a padded array with ``prompt_lens``, or torch tensors; the earlier form
``generate(params, config, prompts, prompt_lens, max_new_tokens)`` still works.

The prefill is one jitted call; the new tokens come from one jitted ``lax.scan``
of ``steps_per_call`` tokens, called until ``max_new_tokens`` are out or every row
has stopped at EOS, with the state (paged caches, block table, logits buffer,
positions) donated so the caches and the buffer are updated in place. Prompts given
as host data (lists, strings, numpy, torch) are padded to a few shapes (batch and
length rounded up to powers of two) so that a notebook's reruns with other prompts
reuse the compiled prefill and loop; a ``jax.Array`` is used as given (its shape
and sharding kept).
"""

from __future__ import annotations

import functools
import math
import numbers
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from mla_jax._checks import as_int, is_int, positive_int
from mla_jax.buffers import reserve_logits_buffer
from mla_jax.decode import QUERY_DTYPES, Backend
from mla_jax.deepseek.checkpoint import DeepseekModel
from mla_jax.deepseek.config import DeepseekConfig
from mla_jax.deepseek.model import DeepseekParams, decode_step, prefill
from mla_jax.loop import DecodeState

# Host prompts are padded to at least this batch and length (then powers of two), so
# small batches and short prompts share one compiled prefill and loop.
MIN_BATCH = 4
MIN_PROMPT_LEN = 16
# The most tokens one call of the jitted loop generates (fewer when fewer are asked):
# the stream, the progress bar and the check for "every row stopped" move this often.
MAX_STEPS_PER_CALL = 16
# ``eos_id``'s default: the checkpoint's ``eos_token_id``.
CHECKPOINT_EOS: Literal["checkpoint"] = "checkpoint"
# What ``generate`` takes as prompts (torch tensors too); see its docstring.
Prompts = str | Sequence[str] | Sequence[Sequence[int]] | Sequence[int] | np.ndarray | jax.Array


class GenerateOutput(NamedTuple):
    tokens: jax.Array  # int32 [B, max_new_tokens]; after a row's EOS, EOS again
    logits: jax.Array | None  # float32 [B, max_new_tokens, vocab]: what each token came from
    lengths: jax.Array  # int32 [B]: the tokens each row generated, its EOS included
    text: list[str] | None = None  # each row's tokens[:length] decoded, with a tokenizer


class LoopOutput(NamedTuple):
    tokens: jax.Array  # int32 [B, num_steps]
    logits: jax.Array | None  # float32 [B, num_steps, vocab], with return_logits
    next_logits: jax.Array  # float32 [B, vocab]: after the last token, for the next call
    state: DecodeState
    done: jax.Array  # bool [B]: the row has emitted EOS


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
    batch = positive_int("batch", batch)
    max_len = positive_int("max_len", max_len)
    page_size = positive_int("page_size", page_size)
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
    prefill,
    static_argnames=("config", "all_logits", "backend", "compute_capability"),
    donate_argnames=("kv_caches",),
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
    logits: jax.Array,
    state: DecodeState,
    key: jax.Array,
    start: int | jax.Array = 0,
    done: jax.Array | None = None,
    *,
    num_steps: int,
    temperature: float,
    top_k: int | None,
    eos_id: int | None,
    backend: Backend,
    return_logits: bool,
    compute_capability: int | None = None,
) -> LoopOutput:
    """``num_steps`` tokens from ``logits`` (each row's next-token logits): sample,
    decode, repeat, in one ``lax.scan``; ``state`` is donated.

    Args:
      start: the index of the first token generated here (the sampling key is
        folded with each token's index, so splitting a generation over several
        calls samples the same tokens).
      done: bool ``[B]``, rows that already emitted ``eos_id`` (they emit it again);
        None: none.

    Returns:
      ``LoopOutput``: the tokens, the logits each came from (or None), the logits
      after the last token and the state, to continue in another call, and ``done``.
    """

    def body(carry, step):
        logits, state, done = carry
        token = _sample(logits, key, step, temperature, top_k)
        if eos_id is not None:
            token = jnp.where(done, eos_id, token)
            done = done | (token == eos_id)
        next_logits, state = decode_step(
            params,
            config,
            token,
            state,
            backend=backend,
            compute_capability=compute_capability,
        )
        return (next_logits, state, done), (token, logits if return_logits else None)

    stopped = jnp.zeros(logits.shape[0], bool) if done is None else done
    (logits, state, stopped), (tokens, all_logits) = lax.scan(
        body, (logits, state, stopped), start + jnp.arange(num_steps)
    )
    if return_logits:
        all_logits = all_logits.transpose(1, 0, 2)
    return LoopOutput(tokens.T, all_logits, logits, state, stopped)


def _cache_dtype(cache_dtype) -> jnp.dtype:
    """A dtype the decode's attention runs in: the caches hold the prefill's latents
    as they are, unquantised, and the queries take the cache's dtype."""
    try:
        dtype = jnp.dtype(cache_dtype)
    except TypeError:
        dtype = None
    if dtype not in QUERY_DTYPES:
        raise ValueError(
            f"cache_dtype: got {cache_dtype!r}, needed None, bfloat16, float16 or float32 "
            "(generate has no quantised cache: an fp8 cache needs a k_scale, "
            "mla_jax.cache.quantize_fp8, and a 16-bit q)"
        )
    return dtype


def _next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text``, special tokens added as the tokenizer's defaults say."""
    ids = tokenizer.encode(text)
    return list(getattr(ids, "ids", ids))  # tokenizers' Encoding, or transformers' list


def _prompt_rows(prompts: Any, prompt_lens: Any, tokenizer: Any) -> list[np.ndarray] | None:
    """Host prompts as one int array a row; None for a ``jax.Array`` (kept as given)."""
    if isinstance(prompts, str) or (
        isinstance(prompts, Sequence) and prompts and all(isinstance(p, str) for p in prompts)
    ):
        texts = [prompts] if isinstance(prompts, str) else list(prompts)
        if tokenizer is None:
            raise ValueError(
                "prompts: got text, but there is no tokenizer; load a checkpoint with one "
                "(load_checkpoint finds tokenizer.json in its folder), pass tokenizer=..., "
                "or pass token ids"
            )
        if prompt_lens is not None:
            raise ValueError("prompt_lens: got it with text prompts; leave it out")
        return [np.asarray(_encode(tokenizer, t), np.int64) for t in texts]
    if isinstance(prompts, jax.Array):
        return None
    torch = _torch_module()
    if torch is not None and isinstance(prompts, torch.Tensor):
        prompts = prompts.detach().cpu().numpy()
    if isinstance(prompts, np.ndarray) or prompt_lens is not None:
        array = np.asarray(prompts)
        if array.ndim == 1:
            array = array[None]
        if array.ndim != 2 or not np.issubdtype(array.dtype, np.integer):
            raise ValueError(
                f"prompts: got {array.dtype}{list(array.shape)}, needed int [B, T] "
                "(right-padded, with prompt_lens) or a list of token-id lists"
            )
        if prompt_lens is None:
            return list(array)
        lens = _check_lens(prompt_lens, *array.shape)
        return [row[:n] for row, n in zip(array, lens)]
    if isinstance(prompts, Sequence) and prompts and all(is_int(t) for t in prompts):
        return [np.asarray(prompts, np.int64)]  # one prompt
    if isinstance(prompts, Sequence) and prompts:
        rows = []
        for i, row in enumerate(prompts):
            if isinstance(row, str) or not (
                isinstance(row, (Sequence, np.ndarray)) and all(is_int(t) for t in row)
            ):
                raise ValueError(
                    f"prompts[{i}]: got {type(row).__name__} {row!r:.60}, needed a list of "
                    "token ids (a list of strings needs all strings)"
                )
            rows.append(np.asarray(row, np.int64))
        return rows
    raise ValueError(
        f"prompts: got {type(prompts).__name__} {prompts!r:.60}, needed text, a list of "
        "texts, a list of token-id lists, or an int array [B, T] (with prompt_lens)"
    )


def _check_ids(ids: np.ndarray, vocab_size: int, hint: str = "", row: int | None = None) -> None:
    """Every token id in ``[0, vocab_size)``; else an error naming the first outside as
    ``prompts[b, t]`` (``ids`` a ``[B, T]`` array, or prompt ``row``'s ids)."""
    outside = np.argwhere((ids < 0) | (ids >= vocab_size))
    if outside.size:
        index = tuple(int(i) for i in outside[0])
        where = index if row is None else (row, *index)
        raise ValueError(
            f"prompts[{', '.join(map(str, where))}] = {ids[index]} is outside the vocabulary "
            f"[0, {vocab_size})" + (f" ({hint})" if hint else "")
        )


def _check_lens(prompt_lens: Any, batch: int, width: int) -> np.ndarray:
    """``prompt_lens`` as host ints, ``batch`` of them in ``[1, width]``."""
    torch = _torch_module()
    if torch is not None and isinstance(prompt_lens, torch.Tensor):
        prompt_lens = prompt_lens.detach().cpu().numpy()
    lens = np.asarray(prompt_lens)
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
    return lens


def _torch_module():
    """torch, when it is imported (a torch tensor cannot exist otherwise)."""
    return sys.modules.get("torch")


def _resolve_eos(eos_id: Any, config: DeepseekConfig) -> int | None:
    if isinstance(eos_id, str) and eos_id == CHECKPOINT_EOS:
        return config.eos_token_id
    if eos_id is None:
        return None
    if not is_int(eos_id) or not 0 <= eos_id < config.vocab_size:
        raise ValueError(
            f"eos_id: got {eos_id!r}, needed a token id in [0, {config.vocab_size}), None "
            f"(no stop) or {CHECKPOINT_EOS!r} (the checkpoint's eos_token_id)"
        )
    return int(eos_id)


def _split_args(model: Any, args: tuple, names: dict[str, Any]) -> tuple[Any, Any, Any]:
    """``(params, config, tokenizer)``, the positional ``args`` put into ``names``."""
    if isinstance(model, DeepseekModel):
        params, config, tokenizer, slots = model.params, model.config, model.tokenizer, 1
    elif isinstance(model, DeepseekParams):
        if not args or not isinstance(args[0], DeepseekConfig):
            raise ValueError(
                "config: generate(params, ...) needs the DeepseekConfig second; or pass "
                "the model load_checkpoint returns: generate(model, prompts, ...)"
            )
        params, config, tokenizer, slots = model, args[0], None, 3
        args = args[1:]
    else:
        raise ValueError(
            f"model: got {type(model).__name__}, needed the DeepseekModel load_checkpoint "
            "returns (or DeepseekParams followed by its DeepseekConfig)"
        )
    if len(args) > slots:
        raise ValueError(
            f"generate: got {len(args)} positional arguments after the model, needed at most "
            f"{slots} ({', '.join(list(names)[:slots])}); pass the others by keyword"
        )
    for name, value in zip(names, args):
        if names[name] is not None:
            raise ValueError(f"{name}: given both by position and by keyword")
        names[name] = value
    return params, config, tokenizer


def _generation(
    model: Any,
    args: tuple,
    *,
    prompts: Any,
    prompt_lens: Any,
    max_new_tokens: Any,
    key: jax.Array | None,
    temperature: float,
    top_k: int | None,
    eos_id: Any,
    tokenizer: Any,
    steps_per_call: int | None,
    backend: Backend,
    return_logits: bool,
    page_size: int,
    cache_dtype: jnp.dtype | None,
    sm_count: int | None,
    default_steps: Callable[[int], int],
) -> Iterator[Any]:
    """The generation as a generator: first the ``_Plan``, then one ``LoopOutput`` a
    call of the loop (``generate`` and ``stream`` read it)."""
    names = dict(prompts=prompts, prompt_lens=prompt_lens, max_new_tokens=max_new_tokens)
    params, config, model_tokenizer = _split_args(model, args, names)
    tokenizer = model_tokenizer if tokenizer is None else tokenizer
    prompts, prompt_lens = names["prompts"], names["prompt_lens"]
    if prompts is None:
        raise ValueError("prompts: missing; pass text, token-id lists or an int array")
    if names["max_new_tokens"] is None:
        raise ValueError("max_new_tokens: missing; pass how many tokens to generate per row")
    new_tokens = positive_int("max_new_tokens", names["max_new_tokens"])
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, numbers.Real)
        or not math.isfinite(temperature)
        or temperature < 0
        or (temperature > 0 and key is None)
    ):
        raise ValueError(
            f"temperature: got {temperature!r} with key={key}, needed 0 (greedy) "
            "or a finite positive temperature with a PRNG key"
        )
    if top_k is not None:
        top_k = as_int("top_k", top_k)
        if not 1 <= top_k <= config.vocab_size:
            raise ValueError(f"top_k: got {top_k}, needed None or in [1, {config.vocab_size}]")
    page_size = positive_int("page_size", page_size)
    if sm_count is not None:
        sm_count = positive_int("sm_count", sm_count)
    eos = _resolve_eos(eos_id, config)
    steps = (
        default_steps(new_tokens)
        if steps_per_call is None
        else positive_int("steps_per_call", steps_per_call)
    )
    calls = -(-new_tokens // steps)
    rows = _prompt_rows(prompts, prompt_lens, tokenizer)
    if rows is None:  # a jax.Array: its shape and sharding are the caller's
        if (
            prompts.ndim != 2
            or prompts.shape[1] < 1
            or not jnp.issubdtype(prompts.dtype, jnp.integer)
        ):
            raise ValueError(
                f"prompts: got {prompts.dtype}{list(prompts.shape)}, needed integer token "
                "ids [B, T >= 1]"
            )
        # A global array over other processes' devices cannot be read here (each
        # process checks the prompts it contributes); any other is checked whole.
        if prompts.is_fully_addressable:
            _check_ids(np.asarray(prompts), config.vocab_size, "padding too: pad with any valid id")
        tokens = jnp.asarray(prompts, jnp.int32)  # every id checked to fit
        batch, width = tokens.shape
        if prompt_lens is None:
            lengths = jnp.full(batch, width, jnp.int32)
        else:
            lengths = jnp.asarray(_check_lens(prompt_lens, batch, width), jnp.int32)
        padded_batch, max_len, done = batch, width + calls * steps, None
    else:
        batch = len(rows)
        for i, row in enumerate(rows):
            if row.size < 1:
                raise ValueError(f"prompts[{i}]: got no tokens, needed at least one")
            _check_ids(row, config.vocab_size, row=i)
        # Padded to a few shapes: batch and width rounded up to powers of two, the
        # padding rows one token long and done from the start.
        padded_batch = max(MIN_BATCH, _next_pow2(batch))
        width = max(MIN_PROMPT_LEN, _next_pow2(max(r.size for r in rows)))
        host = np.zeros((padded_batch, width), np.int32)
        lens = np.ones(padded_batch, np.int32)
        for i, row in enumerate(rows):
            host[i, : row.size], lens[i] = row, row.size
        tokens, lengths = jnp.asarray(host), jnp.asarray(lens)
        max_len = _next_pow2(width + calls * steps)
        done = jnp.asarray(np.arange(padded_batch) >= batch)
    dtype = params.embed.dtype if cache_dtype is None else _cache_dtype(cache_dtype)
    state = new_decode_state(
        config, padded_batch, max_len, page_size=page_size, dtype=dtype, sm_count=sm_count
    )
    yield _Plan(batch, new_tokens, steps, eos, tokenizer, host_rows=rows is not None)
    logits, caches = _prefill(
        params, config, tokens, lengths, state.kv_caches, state.block_table, backend=backend
    )
    state = state._replace(kv_caches=caches, positions=lengths)
    key = jax.random.key(0) if key is None else key
    for call in range(calls):
        out = decode_loop(
            params,
            config,
            logits,
            state,
            key,
            call * steps,
            done,
            num_steps=steps,
            temperature=float(temperature),
            top_k=None if top_k is None else int(top_k),
            eos_id=eos,
            backend=backend,
            return_logits=return_logits,
        )
        yield out
        logits, state, done = out.next_logits, out.state, out.done
        # Every row stopped: the rest would be EOS. (A host sync; one call needs none.)
        if eos is not None and call + 1 < calls and bool(jnp.all(done)):
            return


class _Plan(NamedTuple):
    batch: int  # the caller's rows (the first ``batch`` of the padded ones)
    new_tokens: int
    steps: int  # tokens a call of the loop
    eos: int | None
    tokenizer: Any
    host_rows: bool  # padded host prompts (numpy results), or a jax.Array as given


def _progress_bar(total: int) -> Any:
    try:
        from tqdm.auto import tqdm
    except ImportError as e:
        raise ValueError(
            "progress=True needs tqdm (pip install tqdm; it comes with the deepseek extra)"
        ) from e
    return tqdm(total=total, unit="token", desc="generate")


def _collect(plan: _Plan, calls: list[LoopOutput], return_logits: bool) -> GenerateOutput:
    """The calls' tokens (and logits) joined, cut to the caller's rows and
    ``max_new_tokens``, filled with EOS (NaN logits) past an early stop."""
    # Padded host prompts end in numpy (no compilation for the cuts), a jax.Array's
    # generation in jax (its sharding kept).
    xp: Any = np if plan.host_rows else jnp
    batch, n = plan.batch, plan.new_tokens

    def joined(parts: list[Any], fill: float) -> Any:
        x = parts[0] if len(parts) == 1 else xp.concatenate(parts, axis=1)
        if x.shape[:2] != (batch, n):
            x = x[:batch, :n]
        if x.shape[1] < n:  # every row stopped early
            pad = [(0, 0), (0, n - x.shape[1])] + [(0, 0)] * (x.ndim - 2)
            x = xp.pad(x, pad, constant_values=fill)
        return x

    tokens = joined([xp.asarray(c.tokens) for c in calls], plan.eos or 0)
    logits = None
    if return_logits:
        logits = jnp.asarray(joined([xp.asarray(c.logits) for c in calls], np.nan))
    if plan.eos is None:
        lengths = xp.full(batch, n, xp.int32)
    else:
        hit = tokens == plan.eos
        lengths = xp.where(hit.any(axis=1), hit.argmax(axis=1) + 1, n).astype(xp.int32)
    text = None
    if plan.tokenizer is not None:
        host, ends = np.asarray(tokens), np.asarray(lengths)
        text = [
            plan.tokenizer.decode(row[:end].tolist(), skip_special_tokens=True)
            for row, end in zip(host, ends)
        ]
    return GenerateOutput(jnp.asarray(tokens), logits, jnp.asarray(lengths), text)


def generate(
    model: DeepseekModel | DeepseekParams,
    *args: Any,
    prompts: Prompts | None = None,
    prompt_lens: Any = None,
    max_new_tokens: int | None = None,
    key: jax.Array | None = None,
    temperature: float = 0.0,
    top_k: int | None = None,
    eos_id: int | Literal["checkpoint"] | None = CHECKPOINT_EOS,
    tokenizer: Any = None,
    on_tokens: Callable[[np.ndarray], None] | None = None,
    progress: bool = False,
    steps_per_call: int | None = None,
    backend: Backend = "auto",
    return_logits: bool = False,
    page_size: int = 16,
    cache_dtype: jnp.dtype | None = None,
    sm_count: int | None = None,
) -> GenerateOutput:
    """Continues each prompt by up to ``max_new_tokens`` tokens.

    ``generate(model, prompts, max_new_tokens=32)`` with the ``DeepseekModel`` of
    ``load_checkpoint``; ``generate(params, config, prompts, prompt_lens,
    max_new_tokens)``, the earlier form, works too (the tokenizer then comes from
    ``tokenizer=``).

    Args:
      prompts: text or a list of texts (encoded with the tokenizer, special tokens
        added as it says, e.g. BOS); a list of token-id lists, ragged; one list of
        token ids; an int array or torch tensor ``[B, T]`` (every row ``T`` long, or
        right-padded with ``prompt_lens``). Host data is padded to a batch and width
        rounded up to powers of two (at least 4 and 16) so that other prompts reuse
        the compilation; a ``jax.Array`` is used as it is (shape and sharding kept).
      prompt_lens: int ``[B]`` in ``[1, T]``, with an array of prompts.
      max_new_tokens: the most tokens to generate per row (a Python or numpy int).
      key: a PRNG key, needed when ``temperature > 0`` (the same key, the same tokens).
      temperature: 0 is greedy (argmax); otherwise logits are divided by it and
        sampled, among the ``top_k`` largest when ``top_k`` is set.
      eos_id: the token that stops a row (it then emits it again); by default the
        checkpoint's ``eos_token_id``; None: no stop. The generation ends early
        when every row has stopped.
      tokenizer: for text prompts and ``text`` out; default the model's.
      on_tokens: called with each call's new tokens, int32 ``[B, k]`` numpy, as
        they come (``stream`` gives them one step at a time).
      progress: show a tqdm progress bar of the tokens generated.
      steps_per_call: tokens per call of the jitted loop (the callback, the bar and
        the early stop move this often); default ``max_new_tokens`` rounded up to a
        power of two, at most 16 (a multiple of it is generated and the rest cut).
      backend: the decode steps' attention (``mla_decode``), the prefill's
        attention (``mla_prefill_layer``) and every MoE layer's routed experts
        (``moe``, prefill too) run on it (``"auto"``: the Triton kernels on a GPU,
        XLA elsewhere).
      return_logits: also return the float32 logits each token was chosen from.
      cache_dtype: the paged caches' dtype (the attention dtype); default the
        embedding's.
      sm_count: the multiprocessor count the logits buffer is reserved for (the
        split rule plans with it); ``None`` asks the GPU, or plans for 132 SMs (an
        H100/H200's) without one.

    Returns:
      ``GenerateOutput``: ``tokens`` int32 ``[B, max_new_tokens]`` (EOS again after
      a row's EOS), ``logits`` (float32 ``[B, max_new_tokens, vocab]``, NaN past an
      early stop) or None, ``lengths`` int32 ``[B]`` (each row's tokens, its EOS
      included) and ``text`` (each row's ``tokens[:length]`` decoded without special
      tokens) when there is a tokenizer, else None.
    """
    gen = _generation(
        model,
        args,
        prompts=prompts,
        prompt_lens=prompt_lens,
        max_new_tokens=max_new_tokens,
        key=key,
        temperature=temperature,
        top_k=top_k,
        eos_id=eos_id,
        tokenizer=tokenizer,
        steps_per_call=steps_per_call,
        backend=backend,
        return_logits=return_logits,
        page_size=page_size,
        cache_dtype=cache_dtype,
        sm_count=sm_count,
        default_steps=lambda n: min(_next_pow2(n), MAX_STEPS_PER_CALL),
    )
    plan: _Plan = next(gen)
    bar = _progress_bar(plan.new_tokens) if progress else None
    calls: list[LoopOutput] = []
    try:
        for out in gen:
            calls.append(out)
            take = min(plan.steps, plan.new_tokens - (len(calls) - 1) * plan.steps)
            if on_tokens is not None:
                on_tokens(np.asarray(out.tokens)[: plan.batch, :take])
            if bar is not None:
                bar.update(take)
    finally:
        if bar is not None:
            bar.close()
    return _collect(plan, calls, return_logits)


def stream(
    model: DeepseekModel | DeepseekParams,
    *args: Any,
    prompts: Prompts | None = None,
    prompt_lens: Any = None,
    max_new_tokens: int | None = None,
    key: jax.Array | None = None,
    temperature: float = 0.0,
    top_k: int | None = None,
    eos_id: int | Literal["checkpoint"] | None = CHECKPOINT_EOS,
    tokenizer: Any = None,
    steps_per_call: int | None = None,
    backend: Backend = "auto",
    page_size: int = 16,
    cache_dtype: jnp.dtype | None = None,
    sm_count: int | None = None,
) -> Iterator[np.ndarray]:
    """``generate`` one step at a time: yields each step's tokens, int32 ``[B]``
    numpy (a stopped row's is EOS), until ``max_new_tokens`` or every row stopped.

    The arguments are ``generate``'s, checked before this returns. Each call of the
    jitted loop makes ``steps_per_call`` tokens (default 1: every token as soon as
    it is made); decode a row's tokens with the model's tokenizer as they come.
    """
    gen = _generation(
        model,
        args,
        prompts=prompts,
        prompt_lens=prompt_lens,
        max_new_tokens=max_new_tokens,
        key=key,
        temperature=temperature,
        top_k=top_k,
        eos_id=eos_id,
        tokenizer=tokenizer,
        steps_per_call=steps_per_call,
        backend=backend,
        return_logits=False,
        page_size=page_size,
        cache_dtype=cache_dtype,
        sm_count=sm_count,
        default_steps=lambda _: 1,
    )
    plan: _Plan = next(gen)

    def steps() -> Iterator[np.ndarray]:
        left = plan.new_tokens
        for out in gen:
            host = np.asarray(out.tokens)[: plan.batch, : min(plan.steps, left)]
            left -= host.shape[1]
            yield from host.T

    return steps()
