"""``python -m mla_jax model-bench``: its floors by hand, its dry run, and the weights
it hands transformers.

The floors are checked against numbers worked out here weight by weight for the dry
run's toy model (``model_floors.tiny``), not with the module's own formulas; the dry
run runs whole (both phases, each in its own process) on the CPU, and its
``results.json``, markdown page and log are read back.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mla_jax.deepseek import init_params, load_checkpoint, prefill
from mla_jax.tools import cli, model_bench
from mla_jax.tools import model_floors as floors

# The toy model (tiny("v2-lite", 2)): hidden 64, 4 heads, q LoRA 32, kv LoRA 32, rope
# 16, nope 16, v 16; vocabulary 512; layer 0 a dense MLP of 128, layer 1 MoE: 16
# experts of 32, 6 a token, 2 shared.
ATTENTION = (
    64 * 32  # wq_a
    + 32  # q_a_norm
    + 32 * 4 * 32  # wq_b: 4 heads x (16 nope + 16 rope)
    + 64 * 48  # wkv_a: 32 + 16
    + 32  # kv_a_norm
    + 32 * 4 * 16  # w_uk
    + 32 * 4 * 16  # w_uv
    + 4 * 16 * 64  # wo
)
NORMS = 2 * 64
DENSE = 3 * 64 * 128
ROUTER = 64 * 16
SHARED = 3 * 64 * 64  # 2 shared experts of 32
EXPERT = 3 * 64 * 32
EMBED = HEAD = 512 * 64


def test_the_toy_sizes_are_init_params():
    config = floors.tiny("v2-lite", 2)
    shapes = jax.eval_shape(lambda k: init_params(config, k, jnp.bfloat16), jax.random.key(0))
    total = 2 * (ATTENTION + NORMS) + DENSE + ROUTER + SHARED + 16 * EXPERT + EMBED + HEAD + 64
    assert sum(x.size for x in jax.tree.leaves(shapes)) == total == floors.param_count(config)
    nbytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(shapes))
    assert nbytes == (total - ROUTER) * 2 + ROUTER * 4 == floors.weight_bytes(config)


def hand_floor(batch: int, context: int, nbytes: int, card: floors.Card) -> dict:
    """The toy model's decode floor, weight by weight."""
    touched = 16 * (1 - (1 - 6 / 16) ** batch)
    weights = (
        2 * (ATTENTION + NORMS) * nbytes  # both layers' attention, every weight
        + DENSE * nbytes
        + ROUTER * 4  # float32
        + (SHARED + touched * EXPERT) * nbytes
        + (batch * 64 + 64 + HEAD) * nbytes  # embedding rows, final norm, lm_head
    )
    kv = batch * context * 48 * nbytes * 2  # a 48-wide row a token a layer
    per_token = (
        2 * (ATTENTION - 32 - 32)  # the matrices (not the two norms) of both layers
        + DENSE
        + ROUTER
        + SHARED
        + 6 * EXPERT
        + HEAD
    )
    flops = 2 * batch * per_token + 2 * (2 * batch * 4 * context * (48 + 32))
    memory_s, compute_s = (weights + kv) / card.hbm_bytes_per_s, flops / card.bf16_flops
    return {
        "weights": weights,
        "kv": kv,
        "flops": flops,
        "floor_ms": max(memory_s, compute_s) * 1e3,
        "bound": "memory" if memory_s >= compute_s else "compute",
        "touched": touched,
    }


@pytest.mark.parametrize("batch, context", [(1, 32), (4, 100), (64, 4096)])
@pytest.mark.parametrize("card", [floors.CARDS[1], floors.Card("slow math", 1e12, 1e12)])
def test_decode_floor_by_hand(batch, context, card):
    got = floors.decode_floor(floors.tiny("v2-lite", 2), batch, context, card)
    want = hand_floor(batch, context, 2, card)
    assert got["weight_bytes"] == pytest.approx(want["weights"], rel=1e-12)
    assert got["kv_bytes"] == want["kv"]
    assert got["flops"] == want["flops"]
    assert got["floor_ms"] == pytest.approx(want["floor_ms"], rel=1e-12)
    assert got["bound"] == want["bound"]
    assert got["floor_tokens_per_s"] == pytest.approx(batch / want["floor_ms"] * 1e3)
    assert got["experts_touched_per_moe_layer"] == pytest.approx(want["touched"])


def test_a_slow_card_makes_the_toy_compute_bound():
    # 1 TFLOP/s against 1 TB/s: the toy's 1.7 MFLOP outweigh its 0.46 MB at B=4.
    assert hand_floor(4, 100, 2, floors.Card("x", 1e12, 1e12))["bound"] == "compute"


def test_expected_experts():
    assert floors.expected_experts(64, 6, 1) == pytest.approx(6)
    assert floors.expected_experts(64, 6, 8) == pytest.approx(64 * (1 - (58 / 64) ** 8))
    assert 63.8 < floors.expected_experts(64, 6, 64) < 64


def test_prefill_flops_by_hand():
    # 8 tokens: the matmuls a token, lm_head once, 36 causal pairs a head a layer.
    per_token = 2 * (ATTENTION - 64) + DENSE + ROUTER + SHARED + 6 * EXPERT
    want = 2 * 8 * per_token + 2 * HEAD + 2 * (2 * 4 * 36 * (32 + 16))
    assert floors.prefill_flops(floors.tiny("v2-lite", 2), 1, 8) == want


def test_v2_lite_and_v3_sizes():
    for config in (floors.v2_lite(), floors.v3_stack(2)):
        shapes = jax.eval_shape(lambda k, c=config: init_params(c, k), jax.random.key(0))
        assert floors.param_count(config) == sum(x.size for x in jax.tree.leaves(shapes))
        assert floors.weight_bytes(config) == sum(
            x.size * x.dtype.itemsize for x in jax.tree.leaves(shapes)
        )
    assert floors.param_count(floors.v2_lite()) == 15_706_484_224


def test_the_v3_stack_fills_its_budget():
    one, two = floors.v3_stack(1), floors.v3_stack(2)
    layer = floors.weight_bytes(two) - floors.weight_bytes(one)
    fixed = floors.weight_bytes(one) - layer
    cache = 64 * 4128 * 576 * 2
    for gib in (64, 112):
        n = floors.stack_layers(one, gib * 2**30, batch=64, context=4128)
        assert fixed + n * (layer + cache) <= gib * 2**30 < fixed + (n + 1) * (layer + cache)


def test_cards():
    assert floors.card_for("NVIDIA H100 80GB HBM3").name == "H100 SXM"
    assert floors.card_for("NVIDIA H200").name == "H200"
    assert floors.card_for("NVIDIA H100 PCIe") is None
    card, source = model_bench.resolve_card("NVIDIA H200", None, 1000.0, False)
    assert (card.hbm_bytes_per_s, card.bf16_flops) == (4.8e12, 1e15) and "--tflops" in source
    assert model_bench.resolve_card("cpu", None, None, False)[0] is None
    assert model_bench.resolve_card("cpu", 2.0, 500.0, False)[0].hbm_bytes_per_s == 2e12


def test_the_layer_builder_draws_init_params_weights():
    config = floors.tiny("v2-lite", 2)
    want = jax.jit(init_params, static_argnums=(0, 2))(config, model_bench.model_key(), jnp.float32)
    got = model_bench.build_params(config, jnp.float32)
    for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-7)


# --- The weights transformers gets ----------------------------------------------------


@pytest.fixture(scope="module")
def hf_baseline():
    pytest.importorskip("transformers")
    from mla_jax.tools import hf_baseline

    return hf_baseline


@pytest.mark.parametrize("model", ["v2-lite", "v3-stack"])
@pytest.mark.parametrize("fused", [True, False])
def test_hf_layout_loads_back_to_ours(hf_baseline, model, fused, tmp_path):
    """Ours -> transformers' names and layout -> load_checkpoint: the same arrays and
    the same config."""
    from safetensors.torch import save_file

    config = floors.tiny(model, 2)
    params = init_params(config, jax.random.key(1), jnp.float32)
    tensors = {}
    for i, layer in enumerate(params.layers):
        tensors.update(hf_baseline.hf_layer_tensors(layer, i, config, fused_experts=fused))
    import torch

    tensors.update(
        {
            "model.embed_tokens.weight": torch.from_dlpack(params.embed),
            "model.norm.weight": torch.from_dlpack(params.norm),
            "lm_head.weight": torch.from_dlpack(params.lm_head).T,
        }
    )
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(hf_baseline.hf_dict(config)))
    loaded = load_checkpoint(tmp_path, tokenizer=False)
    assert loaded.config == config
    for x, y in zip(jax.tree.leaves(loaded.params), jax.tree.leaves(params), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_the_v2_lite_config_goes_to_transformers_and_back(hf_baseline):
    from mla_jax.deepseek import from_hf_dict

    for config in (floors.v2_lite(), floors.v3_stack(3)):
        assert from_hf_dict(hf_baseline.hf_dict(config)) == config
        assert hf_baseline.hf_config(config).num_hidden_layers == config.num_hidden_layers


def test_transformers_model_holds_our_weights(hf_baseline):
    """The model built layer by layer gives our prefill's logits (float32, CPU)."""
    config = floors.tiny("v2-lite", 2)
    model = hf_baseline.build_hf_model(config, model_bench.model_key(), jnp.float32, "cpu")
    params = model_bench.build_params(config, jnp.float32)
    tokens = np.random.default_rng(0).integers(0, config.vocab_size, (1, 24))
    state = model_bench.new_decode_state(config, 1, 24, page_size=16, dtype=jnp.float32)
    with jax.default_matmul_precision("highest"):
        ours, _ = prefill(
            params,
            config,
            jnp.asarray(tokens, jnp.int32),
            jnp.full(1, 24, jnp.int32),
            state.kv_caches,
            state.block_table,
            all_logits=True,
        )
    from mla_jax.tools import hf_reference

    want = hf_reference.logits(model, tokens[0])
    got = np.asarray(ours[0])
    assert np.abs(got - want).max() / np.abs(want).max() < 1e-4


def test_time_generate_reads_its_tokens(hf_baseline):
    config = floors.tiny("v2-lite", 1)
    model = hf_baseline.build_hf_model(config, model_bench.model_key(), jnp.float32, "cpu")
    r = hf_baseline.time_generate(model, 2, 8, 3)
    assert r["tokens_read"] == 2 * 4 and r["step_ms"] > 0 and r["prefill_ms"] > 0
    assert r["tokens_per_s"] == pytest.approx(2 / r["step_ms"] * 1e3)


# --- The dry run -------------------------------------------------------------------


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    pytest.importorskip("transformers")
    out = tmp_path_factory.mktemp("model-bench")
    status = cli.main(["model-bench", "--dry-run", "--out", str(out)])
    return status, out


def test_the_dry_run_writes_its_results(dry_run):
    status, out = dry_run
    assert status == 0
    r = json.loads((out / "results.json").read_text())
    assert r["what"] == "model-bench" and r["config"]["dry_run"] is True
    assert r["machine"]["platform"] == "cpu" and r["config"]["backend"] == "xla"
    assert r["model"]["layers"] == 2 and r["model"]["params"] == floors.param_count(
        floors.tiny("v2-lite", 2)
    )
    assert [(d["batch"], d["context"]) for d in r["decode"]] == [(1, 32), (2, 32)]
    assert r["errors"] == [] and r["skipped"] == []
    card = floors.Card(r["card"]["name"], r["card"]["hbm_bytes_per_s"], r["card"]["bf16_flops"])
    assert card == floors.CARDS[1]  # assumed for a dry run: the CPU is no card
    for d in r["decode"]:
        ours, floor = d["ours"], d["floor"]
        assert ours["tokens_per_s"] == pytest.approx(d["batch"] / ours["step_ms"] * 1e3)
        assert ours["tokens_read"] == d["batch"] * 4 * 3  # every call's tokens read
        want = hand_floor(d["batch"], d["context"], 4, card)  # float32 in a dry run
        assert floor["floor_ms"] == pytest.approx(want["floor_ms"], rel=1e-12)
        assert floor["kv_bytes"] == want["kv"]
        assert d["fraction_of_floor"] == pytest.approx(floor["floor_ms"] / ours["step_ms"])
        split = d["split"]
        parts = ("attention_ms", "moe_ms", "dense_mlp_ms", "other_ms")
        assert all(split[k] > 0 for k in (*parts, "mla_decode_ms"))
        assert split["unattributed_ms"] == pytest.approx(
            ours["step_ms"] - sum(split[k] for k in parts)
        )
        theirs = d["transformers"]
        assert theirs["tokens_per_s"] > 0 and theirs["prefill_ms"] > 0
        assert d["speedup_vs_transformers"] == pytest.approx(
            ours["tokens_per_s"] / theirs["tokens_per_s"]
        )
    p = r["prefill"]
    assert p["tokens"] == 32 and p["ours"]["ms"] > 0 and p["transformers_ms"] > 0
    assert p["fraction_of_roofline"] == pytest.approx(
        p["roofline"]["roofline_ms"] / p["ours"]["ms"]
    )
    assert r["parity"]["deepseek_v2"]["pass"] is True
    assert r["transformers"]["model_class"] == "DeepseekV2ForCausalLM"
    assert set(r["method"]) == {"decode", "split", "floor", "prefill", "transformers"}


def test_the_dry_run_page_and_log(dry_run):
    _, out = dry_run
    page = (out / "model-bench.md").read_text()
    for heading in ("## Decode", "## Where a decode step's time goes", "## Prefill", "## Parity"):
        assert heading in page
    assert "| 1 | 32 |" in page and "| 2 | 32 |" in page
    assert "Dry run" in page and "H100 SXM" in page
    log = (out / "model-bench.log").read_text()
    assert "decode B=1 context=32" in log and "transformers B=2 context=32" in log
    assert "parity deepseek_v2 (xla)" in log and "PASS" in log


def test_a_v3_stack_dry_run_decodes_only(tmp_path):
    argv = ["model-bench", "--dry-run", "--model", "v3-stack", "--no-torch", "--no-split"]
    argv += ["--batch", "3", "--contexts", "16", "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    r = json.loads((tmp_path / "results.json").read_text())
    assert [(d["batch"], d["context"]) for d in r["decode"]] == [(3, 16)]
    assert r["prefill"] == {} and r["parity"] == {"skipped": "--no-torch"}
    assert "split" not in r["decode"][0] and "transformers" not in r["decode"][0]
    config = floors.tiny("v3-stack", 2)
    want = floors.decode_floor(config, 3, 16, floors.CARDS[1], dtype_bytes=4, cache_bytes=4)
    got = r["decode"][0]["floor"]
    for key in ("weight_bytes", "kv_bytes", "flops", "floor_ms"):
        assert got[key] == pytest.approx(want[key], rel=1e-12)
    assert got["weight_bytes_by_part"]["dense_mlp"] == 0  # every layer MoE


def test_a_spent_time_budget_skips_and_lists(tmp_path):
    argv = ["model-bench", "--dry-run", "--no-torch", "--time-budget", "0.001"]
    assert cli.main([*argv, "--out", str(tmp_path)]) == 0
    r = json.loads((tmp_path / "results.json").read_text())
    assert r["decode"] == [] and "build" in r["skipped"]
    assert "skipped (time budget)" in (tmp_path / "model-bench.md").read_text()


def test_a_layers_draw_needs_no_more_than_one_expert_stack_beside_it():
    """``init_layer`` draws the routed experts a few at a time, so building a layer
    needs about one expert stack of temporaries beside its weights (compiled for the
    CPU here), where drawing each stack at once held its float32 values and random
    bits, about four stacks: more than a DeepSeek-V3 layer's weights, which ran an
    80 GB GPU out of memory while its second layer was drawn."""
    import dataclasses

    from mla_jax.deepseek.model import init_layer

    config = dataclasses.replace(
        floors.tiny("v3-stack", 1), n_routed_experts=64, moe_intermediate_size=256
    )
    layer = jax.jit(init_layer, static_argnums=(0, 2), static_argnames="moe")
    compiled = layer.lower(config, model_bench.model_key(0), jnp.bfloat16, moe=True).compile()
    stack = 64 * config.hidden_size * 256 * 2  # one [E, hidden, width] bf16 array
    assert compiled.memory_analysis().temp_size_in_bytes <= 1.25 * stack
