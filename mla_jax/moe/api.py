"""``fused_moe``: the routed experts of a mixture of SwiGLU experts through the Triton
kernels (``mla_jax.moe.kernel``), computing only the pairs the router chose.

Three steps, jit-able: the pairs sorted by expert and padded to the kernels' blocks
(``moe_align``, JAX ops; one token's pairs need none, a block each); ``moe_gate_up``;
``moe_down`` with the routing weights; then each token's ``top_k`` rows (stored in
x's dtype) summed in float32. A decode step's token reads only its experts' weights,
each once, straight from the stacked arrays. Shared experts, if given, are more pairs
of every token (weight 1), read in place from the shared MLP.

``fused_mlp``: a dense SwiGLU MLP on one token through the same two kernels, its width
in equal parts, each a shared expert of the token, and no routed expert.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mla_jax._checks import as_int, check_array, check_triton_build
from mla_jax.moe.align import moe_align
from mla_jax.moe.config import MoEConfig, default_config

DTYPES = (jnp.bfloat16, jnp.float16, jnp.float32)


def _check(
    x: jax.Array,
    weights: jax.Array,
    experts: jax.Array,
    gate: jax.Array,
    up: jax.Array,
    down: jax.Array,
    shared: tuple[jax.Array, jax.Array, jax.Array] | None,
) -> None:
    """Shapes and dtypes, each error naming the argument and what it needed."""
    for name, a in dict(x=x, weights=weights, experts=experts, gate=gate, up=up, down=down).items():
        check_array(name, a)
    if x.ndim != 2 or x.dtype not in DTYPES:
        raise ValueError(
            f"x: got {x.dtype}{list(x.shape)}, needed [tokens, hidden] in bfloat16, float16 "
            "or float32 (reshape a [..., hidden] input to 2-D)"
        )
    tokens, hidden = x.shape
    if gate.ndim != 3 or gate.shape[1] != hidden:
        raise ValueError(
            f"gate: got {list(gate.shape)}, needed [experts, {hidden}, intermediate] "
            "(x @ w layout: transpose a [experts, intermediate, hidden] checkpoint array)"
        )
    num_experts, _, inter = gate.shape
    for name, a, shape in (
        ("up", up, (num_experts, hidden, inter)),
        ("down", down, (num_experts, inter, hidden)),
    ):
        if a.shape != shape:
            raise ValueError(f"{name}: got {list(a.shape)}, needed {list(shape)} (gate's)")
    if (
        experts.ndim != 2
        or experts.shape[0] != tokens
        or not jnp.issubdtype(experts.dtype, jnp.integer)
    ):
        raise ValueError(
            f"experts: got {experts.dtype}{list(experts.shape)}, needed integer [{tokens}, top_k]"
        )
    if not 1 <= experts.shape[1] <= num_experts:
        raise ValueError(
            f"experts: got top_k = {experts.shape[1]}, needed 1 to {num_experts} (the experts)"
        )
    if weights.shape != experts.shape or not jnp.issubdtype(weights.dtype, jnp.floating):
        raise ValueError(
            f"weights: got {weights.dtype}{list(weights.shape)}, needed floating "
            f"{list(experts.shape)} (experts')"
        )
    for name, a in dict(gate=gate, up=up, down=down).items():
        if a.dtype != x.dtype:
            raise ValueError(
                f"{name}: got {a.dtype}, needed x's dtype {x.dtype} (cast one of them)"
            )
    if shared is not None:
        if not isinstance(shared, tuple) or len(shared) != 3:
            raise ValueError(
                f"shared: got a {type(shared).__name__}, needed None or a tuple (gate, up, "
                "down) of the shared MLP"
            )
        _check_mlp(
            x,
            shared,
            ("shared gate", "shared up", "shared down"),
            unit=inter,
            gate_needed=f"[{hidden}, n * {inter}] (n shared experts of the routed experts' "
            f"width {inter})",
        )


def _check_mlp(
    x: jax.Array,
    mlp: tuple[jax.Array, jax.Array, jax.Array],
    names: tuple[str, str, str],
    *,
    unit: int,
    gate_needed: str,
) -> None:
    """A SwiGLU MLP's ``(gate, up, down)`` beside ``x [tokens, hidden]``: ``[hidden,
    width]`` twice and ``[width, hidden]``, ``width`` a positive multiple of ``unit``,
    in x's dtype; each error names the array (``names``), ``gate_needed`` the words
    for gate's shape."""
    for name, a in zip(names, mlp):
        check_array(name, a)
    gate, up, down = mlp
    hidden = x.shape[1]
    width = gate.shape[1] if gate.ndim == 2 else 0
    if gate.ndim != 2 or gate.shape[0] != hidden or width == 0 or width % unit:
        raise ValueError(f"{names[0]}: got {list(gate.shape)}, needed {gate_needed}")
    for name, a, want in ((names[1], up, (hidden, width)), (names[2], down, (width, hidden))):
        if a.shape != want:
            raise ValueError(f"{name}: got {list(a.shape)}, needed {list(want)} (gate's)")
    for name, a in zip(names, mlp):
        if a.dtype != x.dtype:
            raise ValueError(
                f"{name}: got {a.dtype}, needed x's dtype {x.dtype} (cast one of them)"
            )


def fused_moe(
    x: jax.Array,
    weights: jax.Array,
    experts: jax.Array,
    gate: jax.Array,
    up: jax.Array,
    down: jax.Array,
    *,
    shared: tuple[jax.Array, jax.Array, jax.Array] | None = None,
    compute_capability: int | None = None,
    config: MoEConfig | None = None,
    tokens: int | None = None,
    top_k: int | None = None,
) -> jax.Array:
    """``sum_j weights[t, j] * down_e(silu(x[t] @ gate_e) * (x[t] @ up_e))``, with ``e =
    experts[t, j]``, for each token ``t``: the routed experts, on a CUDA GPU.

    Args:
      x: ``[rows, hidden]``, bfloat16, float16 or float32.
      weights: floating ``[rows, columns]``, the routing weights (used in float32).
      experts: integer ``[rows, columns]``, each in ``[0, E)`` (a traced id cannot be
        checked: one outside leaves its pair out and its token's sum unspecified).
        A token's choices are its row's first ``top_k`` columns.
      gate, up: ``[E, hidden, intermediate]``; down: ``[E, intermediate, hidden]``
        (``x @ w`` layout), in x's dtype.
      shared: None, or the shared experts' MLP ``(gate, up, down)``, ``[hidden, n *
        intermediate]`` twice and ``[n * intermediate, hidden]``, added to every
        token's sum (weight 1) as ``n`` more experts of the same kernels: worth it
        where the shared MLP is a weight stream (``shared_in_kernels``).
      compute_capability: the CUDA capability to build for (e.g. 90: lowering needs
        no GPU); None asks device 0 at lowering.
      config: the kernels' tiles (``MoEConfig``); None: ``default_config``'s choice.
      tokens: how many of the rows are tokens, the rest padding, never read (a decode
        step's zero row at batch one: no slice of the router's outputs); None: all.
      top_k: how many of ``experts``' columns a token uses, the first (a ranking of
        every expert, best first, as ``route(ranked=True)`` gives: one token's are
        read in place); None: all of them.

    Returns:
      float32 ``[tokens, hidden]``. Two roundings to x's dtype: ``h``, the SwiGLU
      between the kernels, and each pair's weighted output (as a bf16 PyTorch MoE
      stores each expert's); the products, the weighting and the sum are float32.
      (The per-pair outputs are the MoE's largest array at prefill sizes: in x's
      dtype they are written and read at half float32's bytes.)
    """
    _check(x, weights, experts, gate, up, down, shared)
    cc = check_triton_build(x.dtype, compute_capability, config, MoEConfig, operands="weights")
    rows, hidden = x.shape
    tokens = rows if tokens is None else as_int("tokens", tokens, 0)
    if tokens > rows:
        raise ValueError(f"tokens: got {tokens}, needed at most x's {rows} rows (or None)")
    columns = experts.shape[1]
    routed = columns if top_k is None else as_int("top_k", top_k, 1)
    if routed > columns:
        raise ValueError(f"top_k: got {routed}, needed at most experts' {columns} columns")
    num_experts, _, inter = gate.shape
    if tokens == 0:
        return jnp.zeros((tokens, hidden), jnp.float32)
    if config is None:
        config = default_config(
            tokens=tokens,
            top_k=routed,
            num_experts=num_experts,
            itemsize=x.dtype.itemsize,
        )
    n_shared = 0 if shared is None else shared[0].shape[1] // inter
    s_gate, s_up, s_down = (gate, up, down) if shared is None else shared
    top_k = routed + n_shared
    num_pairs = tokens * top_k
    # One token's pairs are a block each, in their own order: the kernels read its
    # experts and weights in place (no alignment, no concatenation), the first
    # ``routed`` values of the arrays; they read x's rows by token, so padding rows
    # and columns past ``routed`` go unread.
    one_token = tokens == 1
    if one_token:
        chosen = experts.reshape(-1).astype(jnp.int32)
        blocks = (chosen, chosen, chosen)  # pairs and num_padded are not read
        routing = weights.reshape(-1).astype(jnp.float32)
    else:
        experts, weights = experts[:tokens, :routed], weights[:tokens, :routed]
        if n_shared:  # shared expert s is expert E + s of every token, weight 1
            ids = jnp.arange(num_experts, num_experts + n_shared, dtype=experts.dtype)
            experts = jnp.concatenate([experts, jnp.broadcast_to(ids, (tokens, n_shared))], 1)
            weights = jnp.concatenate([weights, jnp.ones((tokens, n_shared), weights.dtype)], 1)
        aligned = moe_align(experts, num_experts + n_shared, config.block_m)
        blocks = (aligned.pairs, aligned.block_experts, aligned.num_padded)
        routing = weights.reshape(-1).astype(jnp.float32)
    out = _run(
        x,
        (gate, up, down),
        (s_gate, s_up, s_down),
        blocks,
        routing,
        num_pairs=num_pairs,
        top_k=top_k,
        num_experts=num_experts,
        intermediate=inter,
        shared=n_shared,
        one_token=one_token,
        config=config,
        out_dtype=x.dtype,
        cc=cc,
    )
    return out.reshape(tokens, top_k, hidden).sum(axis=1, dtype=jnp.float32)


def fused_mlp(
    x: jax.Array,
    gate: jax.Array,
    up: jax.Array,
    down: jax.Array,
    *,
    slices: int,
    compute_capability: int | None = None,
    config: MoEConfig | None = None,
) -> jax.Array:
    """``down(silu(x[0] @ gate) * (x[0] @ up))``, a SwiGLU MLP on one token, through
    ``fused_moe``'s kernels on a CUDA GPU: the MLP's width in ``slices`` equal parts,
    each a shared expert of the token, and no routed expert.

    Why: at one token an MLP is a stream of its weights, as the experts are; XLA's
    split-K GEMM pads a reduction that is not a multiple of its tile, which for
    DeepSeek-V2-Lite's dense MLP (10944 wide) copies the 45 MB down-projection
    weight every step. The slices read every weight in place, once; each slice's
    down product is a partial sum of the output (split-K), stored in float32.

    Args:
      x: ``[rows, hidden]``, bfloat16, float16 or float32; the token is the first row,
        the others go unread (a decode step's zero row at batch one).
      gate, up: ``[hidden, width]``; down: ``[width, hidden]`` (``x @ w`` layout), in
        x's dtype, ``width`` a multiple of ``slices``.
      slices: how many parts (``mla_jax.moe.config.mlp_slices`` picks them).
      compute_capability, config: as ``fused_moe``'s (the config of one token).

    Returns:
      float32 ``[1, hidden]``: ``h``, the SwiGLU between the kernels, rounded once to
      x's dtype; the products and the sum of the slices float32.
    """
    check_array("x", x)
    if x.ndim != 2 or x.dtype not in DTYPES or x.shape[0] < 1:
        raise ValueError(
            f"x: got {x.dtype}{list(x.shape)}, needed [rows >= 1, hidden] in bfloat16, "
            "float16 or float32"
        )
    slices = as_int("slices", slices, 1)
    needed = f"[{x.shape[1]}, width] with width a multiple of slices={slices}"
    _check_mlp(x, (gate, up, down), ("gate", "up", "down"), unit=slices, gate_needed=needed)
    width = gate.shape[1]
    cc = check_triton_build(x.dtype, compute_capability, config, MoEConfig, operands="weights")
    if config is None:
        config = default_config(tokens=1, top_k=slices, num_experts=0, itemsize=x.dtype.itemsize)
    unread = jnp.zeros((1,), jnp.int32)  # no routed experts: no ids, weights or alignment
    out = _run(
        x,
        (gate, up, down),
        (gate, up, down),
        (unread, unread, unread),
        unread.astype(jnp.float32),
        num_pairs=slices,
        top_k=slices,
        num_experts=0,
        intermediate=width // slices,
        shared=slices,
        one_token=True,
        config=config,
        out_dtype=jnp.float32,
        cc=cc,
    )
    return out.sum(axis=0, keepdims=True)


def _run(
    x: jax.Array,
    routed: tuple[jax.Array, jax.Array, jax.Array],
    shared_mlp: tuple[jax.Array, jax.Array, jax.Array],
    blocks: tuple[jax.Array, jax.Array, jax.Array],
    routing: jax.Array,
    *,
    num_pairs: int,
    top_k: int,
    num_experts: int,
    intermediate: int,
    shared: int,
    one_token: bool,
    config: MoEConfig,
    out_dtype: jnp.dtype,
    cc: int | None,
) -> jax.Array:
    """Both kernels over ``num_pairs`` pairs of ``intermediate``-wide experts (the
    ``routed`` stacks', then ``shared`` slices of ``shared_mlp``): the pair outputs,
    ``[num_pairs, hidden]`` in ``out_dtype``."""
    from mla_jax import _launch  # Triton: an optional dependency
    from mla_jax.moe import kernel

    hidden = x.shape[1]
    gate_up, down_launch = kernel.launch_params(
        num_pairs=num_pairs,
        top_k=top_k,
        num_experts=num_experts,
        hidden=hidden,
        intermediate=intermediate,
        float32=x.dtype == jnp.float32,
        config=config,
        shared=shared,
        one_token=one_token,
    )
    (h,) = _launch.launch(
        kernel.moe_gate_up,
        [x, routed[0], routed[1], shared_mlp[0], shared_mlp[1], *blocks],
        out_shapes=[jax.ShapeDtypeStruct((num_pairs, intermediate), x.dtype)],
        compute_capability=cc,
        **gate_up,
    )
    (out,) = _launch.launch(
        kernel.moe_down,
        [h, routed[2], shared_mlp[2], *blocks, routing],
        out_shapes=[jax.ShapeDtypeStruct((num_pairs, hidden), out_dtype)],
        compute_capability=cc,
        **down_launch,
    )
    return out
