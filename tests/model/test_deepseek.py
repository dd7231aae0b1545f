"""DeepSeek-V2/V3 through mla_jax against transformers' PyTorch models.

Tiny random models (3 layers: one dense MLP, two MoE with group-limited routing;
YaRN with prompts past the pre-training context; with and without a q LoRA) are
saved with ``save_pretrained`` and loaded with ``load_checkpoint``. Checked: prefill
logits, 20 greedy tokens for ragged prompts, and each step's logits under the same
tokens, in float32 (1e-4 relative) and bfloat16 (bf16 tolerance), on the xla backend,
and on a GPU the same in float32 with every Triton kernel (``backend="triton"``).
"""

import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from mla_jax.deepseek import generate, load_checkpoint, new_decode_state, prefill  # noqa: E402
from mla_jax.tools import hf_reference as hf  # noqa: E402

CASES = {"v3": ("deepseek_v3", 24), "v2": ("deepseek_v2", None)}  # (model_type, q_lora_rank)
PROMPT_LENS = np.array([40, 23, 7])  # positions up to 60, past the 16-token pre-training
NEW_TOKENS = 20
RTOL = 1e-4
SM = 132  # the split rule's multiprocessor count (an H200's): no GPU to ask here


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    """(torch model, checkpoint folder, loaded config and float32 params, prompts)."""
    kind, q_lora = CASES[request.param]
    model = hf.tiny_model(hf.tiny_config(kind, q_lora_rank=q_lora), seed=len(request.param))
    folder = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(folder)
    config, params = load_checkpoint(folder)
    prompts = np.random.default_rng(1).integers(0, config.vocab_size, (3, PROMPT_LENS.max()))
    return model, folder, config, params, prompts


@pytest.fixture(scope="module")
def generated(case):
    """20 greedy tokens per prompt, with their logits (xla backend)."""
    _, _, config, params, prompts = case
    return generate(
        params,
        config,
        prompts,
        PROMPT_LENS,
        NEW_TOKENS,
        backend="xla",
        return_logits=True,
        sm_count=SM,
    )


def _rel(got, want):
    return float(np.abs(np.asarray(got, np.float32) - want).max() / np.abs(want).max())


def _assert_matches_transformers(model, prompts, out, lens=PROMPT_LENS):
    """Each row's generated tokens equal transformers' greedy ones, and each step's
    logits are within ``RTOL`` of the model's, teacher-forced: the whole sequence in
    one forward pass, logits at the positions each new token was chosen from."""
    for b, n in enumerate(lens):
        np.testing.assert_array_equal(
            out.tokens[b], hf.greedy(model, prompts[b, :n], NEW_TOKENS), err_msg=f"row {b}"
        )
        sequence = np.concatenate([prompts[b, :n], np.asarray(out.tokens[b])])
        want = hf.logits(model, sequence)[n - 1 : n - 1 + NEW_TOKENS]
        assert _rel(out.logits[b], want) < RTOL, f"row {b}"


def _prefill_logits(config, params, prompts, dtype=jnp.float32):
    state = new_decode_state(config, len(prompts), prompts.shape[1], dtype=dtype, sm_count=SM)
    logits, _ = jax.jit(prefill, static_argnames=("config", "all_logits"))(
        params,
        config,
        jnp.asarray(prompts, jnp.int32),
        jnp.asarray(PROMPT_LENS, jnp.int32),
        state.kv_caches,
        state.block_table,
        all_logits=True,
    )
    return np.asarray(logits)


def test_config_is_read(case):
    model, _, config, params, _ = case
    a = config.attention
    assert config.model_type == model.config.model_type
    assert (a.q_lora_rank is None) == (params.layers[0].attn.wq_a is None)
    assert a.rope_scaling.factor == 4.0 and a.rms_norm_eps == 1e-5
    assert a.softmax_scale == pytest.approx(model.model.layers[0].self_attn.scaling)
    assert [config.is_moe_layer(i) for i in range(3)] == [False, True, True]


def test_prefill_logits_match(case):
    model, _, config, params, prompts = case
    got = _prefill_logits(config, params, prompts)
    for b, n in enumerate(PROMPT_LENS):
        want = hf.logits(model, prompts[b, :n])
        assert _rel(got[b, :n], want) < RTOL, f"row {b}"


def test_greedy_generation_matches(case, generated):
    """Ragged prompts, one batch: the same 20 tokens as transformers' generate, and
    each step's logits within 1e-4 of the model's on the same tokens."""
    model, _, config, _, prompts = case
    out = generated
    assert out.tokens.shape == (3, NEW_TOKENS) and out.tokens.dtype == jnp.int32
    assert out.logits.shape == (3, NEW_TOKENS, config.vocab_size)
    _assert_matches_transformers(model, prompts, out)


@pytest.mark.gpu
def test_greedy_generation_on_the_triton_backend_matches(case):
    """On a GPU, ``backend="triton"`` runs every kernel the model has (the prefill's
    flash attention, the MoE's fused kernels, ``mla_decode``; float32 with IEEE dots):
    the same 20 greedy tokens as transformers, and each step's logits within 1e-4 of
    the model's on the same tokens."""
    model, _, config, params, prompts = case
    out = generate(
        params, config, prompts, PROMPT_LENS, NEW_TOKENS, backend="triton", return_logits=True
    )
    _assert_matches_transformers(model, prompts, out)


@pytest.mark.parametrize("backend", ["xla", pytest.param("triton", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("row", [0, 2])
def test_batch_one_generation_matches(case, row, backend):
    """One prompt at a time: the batch-one step (its zero row; on a GPU the MoE's
    one-token kernels reading the router's choices in place) gives the same greedy
    tokens as transformers, each step's logits within ``RTOL``."""
    model, _, config, params, prompts = case
    one, lens = prompts[row : row + 1], PROMPT_LENS[row : row + 1]
    out = generate(params, config, one, lens, NEW_TOKENS, backend=backend, return_logits=True)
    _assert_matches_transformers(model, one, out, lens)


def test_bfloat16_within_bf16_tolerance(case):
    """bf16 weights and caches against the float32 model. A token whose router scores
    are within bf16 rounding of each other can pick another expert (transformers' own
    bf16 model does too), so most positions must be close, not all."""
    model, folder, _, _, prompts = case
    config, params = load_checkpoint(folder, dtype=jnp.bfloat16)
    assert params.embed.dtype == jnp.bfloat16
    assert params.layers[1].mlp.router.dtype == jnp.float32  # routed in float32
    got = _prefill_logits(config, params, prompts, jnp.bfloat16)
    errors = []
    for b, n in enumerate(PROMPT_LENS):
        want = hf.logits(model, prompts[b, :n])
        errors += list(np.abs(got[b, :n] - want).max(axis=-1) / np.abs(want).max())
    assert np.median(errors) < 3e-2 and np.mean(np.asarray(errors) > 0.1) < 0.1, errors


def test_fused_sharded_layout_loads_the_same(case, tmp_path):
    _, folder, config, params, _ = case
    hf.save_fused(folder, tmp_path)
    assert (tmp_path / "model.safetensors.index.json").exists()
    assert len(list(tmp_path.glob("*.safetensors"))) == 2
    fused_config, fused = load_checkpoint(tmp_path)
    assert fused_config == config
    assert jax.tree.structure(fused) == jax.tree.structure(params)
    for a, b in zip(jax.tree.leaves(fused), jax.tree.leaves(params)):
        np.testing.assert_array_equal(a, b)


def test_sampling_top_1_and_eos(case, generated):
    """``top_k=1`` sampling is greedy; a row that emits ``eos_id`` emits only it after."""
    _, _, config, params, prompts = case
    if config.model_type != "deepseek_v3":
        pytest.skip("the sampling path is the same for both models")
    greedy = np.asarray(generated.tokens)
    eos = int(greedy[0, 3])
    sampled = np.asarray(
        generate(
            params,
            config,
            prompts,
            PROMPT_LENS,
            NEW_TOKENS,
            key=jax.random.key(3),
            temperature=0.7,
            top_k=1,
            eos_id=eos,
            backend="xla",
            sm_count=SM,
        ).tokens
    )
    for row, want in zip(sampled, greedy):
        hits = np.flatnonzero(want == eos)
        if hits.size:
            want = np.where(np.arange(NEW_TOKENS) > hits[0], eos, want)
        np.testing.assert_array_equal(row, want)
    with pytest.raises(ValueError, match=r"temperature: got 0\.5 with key=None"):
        generate(params, config, prompts, PROMPT_LENS, 8, temperature=0.5)
    with pytest.raises(ValueError, match="prompt_lens: got"):
        generate(params, config, prompts, [0, 3, 3], 8)


def _write_config(folder, **changes):
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}},
            "quantization_config \\('fp8'\\)",
        ),
        (
            {"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4}},
            "rope_scaling type: got 'longrope'",
        ),
        ({"model_type": "llama"}, "model_type: got 'llama'"),
        ({"hidden_act": "gelu"}, "hidden_act: got 'gelu'"),
    ],
)
def test_unsupported_checkpoints_raise(case, tmp_path, changes, message):
    _, folder, _, _, _ = case
    for f in folder.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    _write_config(tmp_path, **changes)
    with pytest.raises(ValueError, match=message):
        load_checkpoint(tmp_path)


def test_ranked_routing_opens_with_the_top_k(case):
    """``route(ranked=True)``: V2's rule ranks every expert, best first, its first k
    columns ``route``'s choices and weights (what the one-token MoE kernels read in
    place); V3's are its top k as ``route`` gives them."""
    from mla_jax.deepseek import route

    _, _, config, params, _ = case
    moe = next(p.mlp for i, p in enumerate(params.layers) if config.is_moe_layer(i))
    x = jax.random.normal(jax.random.key(3), (5, config.hidden_size), jnp.float32)
    weights, experts = map(np.asarray, route(moe, config, x))
    ranked_weights, ranked = map(np.asarray, route(moe, config, x, ranked=True))
    k, num_experts = config.num_experts_per_tok, config.n_routed_experts
    width = num_experts if config.model_type == "deepseek_v2" else k
    assert ranked.shape == ranked_weights.shape == (5, width)
    np.testing.assert_array_equal(ranked[:, :k], experts)
    np.testing.assert_array_equal(ranked_weights[:, :k], weights)
    if width > k:
        assert (np.sort(ranked, axis=1) == np.arange(num_experts)).all()
        assert (np.diff(ranked_weights, axis=1) <= 0).all()


def test_batch_one_step_has_no_vector_matmul(case):
    """At B=1 each matmul of a decode step has two rows, lowered for an H100/H200: a
    one-row operand is what XLA's GPU compiler rewrites into a multiply and a
    reduction. The second row is the zero row ``decode_step`` carries from the
    embedding on, not a pad before each matmul (``mla_jax.layer.project``'s)."""
    pytest.importorskip("triton")
    from mla_jax.deepseek.model import decode_step

    _, _, config, params, _ = case
    state = jax.eval_shape(lambda: new_decode_state(config, 1, 64, dtype=jnp.float32, sm_count=SM))

    def step(params, tokens, state):
        return decode_step(params, config, tokens, state, backend="triton", compute_capability=90)

    args = (jax.eval_shape(lambda: params), jax.ShapeDtypeStruct((1,), jnp.int32), state)
    text = jax.jit(step).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    dots = re.findall(r"stablehlo\.dot_general .*: \((tensor<[^>]*>), (tensor<[^>]*>)\)", text)
    assert len(dots) >= 5 * config.num_hidden_layers
    assert [d for d in dots if any(t.startswith("tensor<1x") for t in d)] == []
    # The second row rides along from the embedding (decode_step): no matmul pads its
    # operand with a zero row of its own, a kernel each.
    two_rows = r"stablehlo\.concatenate [^\n]*: \(tensor<1x[^>]*>, tensor<1x[^>]*>\) -> tensor<2x"
    assert re.findall(two_rows, text) == []


def test_batch_one_step_matches_the_public_layers(case):
    """``decode_step`` at B=1 carries a zero row beside the token; composed from the
    public layer ops instead (``mla_decode_layer``, ``moe``, each matmul's lone row
    padded by ``project``), the step gives the same logits and caches."""
    from mla_jax.deepseek.model import MoEParams, _logits, decode_step, mlp, moe
    from mla_jax.layer import mla_decode_layer, rms_norm

    _, _, config, params, prompts = case
    state = new_decode_state(config, 1, 64, dtype=jnp.float32, sm_count=SM)
    _, caches = prefill(
        params, config, jnp.asarray(prompts[:1, :9]), jnp.array([9], jnp.int32),
        state.kv_caches, state.block_table, backend="xla",
    )  # fmt: skip
    state = state._replace(kv_caches=caches, positions=jnp.array([9], jnp.int32))
    tokens = jnp.asarray(prompts[:1, 9])

    def composed(params, tokens, state):
        h, buffer, new = params.embed[tokens], state.logits_buffer, []
        for layer, cache in zip(params.layers, state.kv_caches):
            x = rms_norm(h, layer.input_norm, config.rms_norm_eps)
            attn, cache, buffer = mla_decode_layer(
                layer.attn, config.attention, x, cache, state.block_table,
                state.positions, buffer, backend="xla",
            )  # fmt: skip
            h = h + attn
            x = rms_norm(h, layer.post_attn_norm, config.rms_norm_eps)
            if isinstance(layer.mlp, MoEParams):
                h = h + moe(layer.mlp, config, x, backend="xla")
            else:
                h = h + mlp(layer.mlp, x)
            new.append(cache)
        return _logits(params, config, h), new

    step = jax.jit(lambda p, t, s: decode_step(p, config, t, s, backend="xla"))
    logits, after = step(params, tokens, state)
    want, want_caches = jax.jit(composed)(params, tokens, state)
    # The same float32 sums, in an order XLA may choose apart for one row and two (a
    # GPU's split-K, autotuned): within 1e-5 of the largest value (an H100 gave 9.5e-7).
    assert _rel(logits, np.asarray(want)) < 1e-5
    for got, cache in zip(after.kv_caches, want_caches):
        assert _rel(got, np.asarray(cache)) < 1e-5


def test_decode_loop_lowers_for_sm90(case):
    """The whole generation loop with the Triton kernels, lowered for an H100/H200
    (CUDA capability 9.0) on a machine without a GPU."""
    pytest.importorskip("triton")
    from jax import export

    from mla_jax.deepseek.generate import decode_loop
    from tests.kernel_calls import DISABLED, kernel_calls

    _, _, config, params, _ = case
    if config.model_type != "deepseek_v3":
        pytest.skip("one model is enough to lower")
    spec = jax.ShapeDtypeStruct
    state = jax.eval_shape(lambda: new_decode_state(config, 2, 128, dtype=jnp.float32, sm_count=SM))
    logits = spec((2, config.vocab_size), jnp.float32)

    def loop(params, logits, state, key):
        return decode_loop(
            params,
            config,
            logits,
            state,
            key,
            num_steps=4,
            temperature=0.0,
            top_k=None,
            eos_id=None,
            backend="triton",
            return_logits=False,
            compute_capability=90,
        )

    exported = export.export(jax.jit(loop), platforms=["cuda"], disabled_checks=DISABLED)(
        jax.eval_shape(lambda: params), logits, state, jax.eval_shape(lambda: jax.random.key(0))
    )
    text = exported.mlir_module()
    # Stage 1 and stage 2 (in the one decode-step function every layer calls), inside
    # one while loop.
    assert len(kernel_calls(text)) >= 2
    assert "stablehlo.while" in text
