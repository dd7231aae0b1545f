"""``generate``'s front end: text in, text out, like transformers'.

One tiny random DeepSeek-V2 (``mla_jax.tools.hf_reference``) and a word-level
tokenizer saved together in a temp folder, as ``save_pretrained`` would; its EOS is
a token one greedy continuation reaches. Checked against transformers' own greedy
``generate`` on ragged text prompts (xla backend): the tokens up to each row's EOS,
the lengths, the text; one compilation for three calls of batch sizes 1, 2, 3; the
stream, the callback and the progress bar; other prompt forms; loading from a
Hugging Face cache folder.
"""

import logging
import re
import shutil

import jax
import numpy as np
import pytest

pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
tokenizers = pytest.importorskip("tokenizers")

from mla_jax.deepseek import (  # noqa: E402
    DeepseekModel,
    generate,
    load_checkpoint,
    load_tokenizer,
    stream,
)
from mla_jax.tools import hf_reference as hf  # noqa: E402

TEXTS = ["some text", "other"]
NEW = 8
OPTIONS = dict(backend="xla")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """(torch model, folder, tokenizer, eos): EOS is the third token greedy gives the
    first prompt, so that row stops early."""
    model = hf.tiny_model(hf.tiny_config("deepseek_v2", q_lora_rank=None), seed=5)
    prompt = [10 + hf.WORDS.index(w) for w in TEXTS[0].split()]
    eos = int(hf.greedy(model, np.asarray(prompt), 3)[2])
    folder = hf.save_tiny_checkpoint(tmp_path_factory.mktemp("tiny-v2"), model, eos_token_id=eos)
    return model, folder, hf.word_tokenizer(model.config.vocab_size, eos_token_id=eos), eos


@pytest.fixture(scope="module")
def model(saved):
    return load_checkpoint(saved[1])


@pytest.fixture(scope="module")
def out(model):
    return generate(model, TEXTS, max_new_tokens=NEW, **OPTIONS)


def test_text_to_text_matches_transformers(saved, model, out):
    """Ragged text prompts: the same tokens as transformers' greedy ``generate`` up to
    and including each row's EOS, EOS after it, the lengths, and the text."""
    torch_model, _, tokenizer, eos = saved
    assert isinstance(model, DeepseekModel) and model.config.eos_token_id == eos
    assert "\n" not in repr(model) and "tokenizer=" in repr(model)
    assert out.tokens.shape == (2, NEW) and out.logits is None
    want_lengths = []
    for b, text in enumerate(TEXTS):
        ids = tokenizer(text)["input_ids"]
        want = hf.greedy(torch_model, np.asarray(ids), NEW)  # stops at EOS
        n = len(want)
        want_lengths.append(n)
        np.testing.assert_array_equal(out.tokens[b, :n], want, err_msg=f"row {b}")
        assert (np.asarray(out.tokens[b, n:]) == eos).all()
        assert out.text[b] == tokenizer.decode(want, skip_special_tokens=True)
    assert want_lengths[0] == 3 and out.text[0].split()[-1] != "</s>"  # stopped at EOS
    np.testing.assert_array_equal(out.lengths, want_lengths)


def test_three_batch_sizes_compile_at_most_once(model, caplog):
    """Batch sizes 1, 2, 3 and other prompt lengths fall in one padded shape: the
    prefill and the decode loop compile at most once across the three calls."""
    prompts = [["some"], ["some text", "other"], ["other", "some text other", "text"]]
    compiled = re.compile(r"Compiling jit\((prefill|decode_loop)\)")
    with caplog.at_level(logging.WARNING), jax.log_compiles():
        outs = [generate(model, p, max_new_tokens=NEW, **OPTIONS) for p in prompts]
    names = [m[1] for r in caplog.records if (m := compiled.search(r.getMessage()))]
    assert all(names.count(n) <= 1 for n in names), names
    assert [len(o.text) for o in outs] == [1, 2, 3]


def test_stream_callback_progress_bar_and_seeded_sampling(model, out, capsys):
    """The stream is the greedy tokens step by step, up to the step every row has
    stopped. Sampling with a key gives the same tokens whether the loop makes 2 or 8
    of them a call; the callback sees each call's."""
    steps = list(stream(model, TEXTS, max_new_tokens=NEW, **OPTIONS))
    assert all(s.shape == (2,) and s.dtype == np.int32 for s in steps)
    np.testing.assert_array_equal(np.stack(steps, 1), out.tokens[:, : len(steps)])
    seen = []
    sample = dict(temperature=1.0, key=jax.random.key(7), max_new_tokens=NEW, **OPTIONS)
    sampled = generate(
        model, TEXTS, on_tokens=seen.append, progress=True, steps_per_call=2, **sample
    )
    assert "token" in capsys.readouterr().err  # tqdm writes to stderr
    np.testing.assert_array_equal(np.concatenate(seen, 1), sampled.tokens[:, : 2 * len(seen)])
    np.testing.assert_array_equal(generate(model, TEXTS, **sample).tokens, sampled.tokens)
    assert (np.asarray(sampled.tokens) != np.asarray(out.tokens)).any()  # not greedy


def test_other_prompt_forms_give_the_same_tokens(saved, model, out):
    """Token-id lists, a padded torch tensor with prompt_lens, numpy integer
    arguments, the bare ``tokenizers.Tokenizer``; ``eos_id=None`` runs on."""
    _, folder, tokenizer, _ = saved
    ids = [tokenizer(t)["input_ids"] for t in TEXTS]
    padded = torch.tensor([ids[0], ids[1] + [0]])
    for got in (
        generate(model, ids, max_new_tokens=np.int64(NEW), **OPTIONS),
        generate(model, padded, prompt_lens=torch.tensor([2, 1]), max_new_tokens=NEW, **OPTIONS),
    ):
        np.testing.assert_array_equal(got.tokens, out.tokens)
        np.testing.assert_array_equal(got.lengths, out.lengths)
    bare = folder.parent / "bare-tokenizer"
    bare.mkdir(exist_ok=True)
    shutil.copy(folder / "tokenizer.json", bare)
    plain = load_tokenizer(bare)
    assert isinstance(plain, tokenizers.Tokenizer)
    got = generate(model, TEXTS, max_new_tokens=NEW, tokenizer=plain, **OPTIONS)
    assert got.text == out.text
    on = generate(model, TEXTS, max_new_tokens=NEW, eos_id=None, **OPTIONS)
    np.testing.assert_array_equal(on.lengths, [NEW, NEW])
    n = int(out.lengths[0])
    np.testing.assert_array_equal(on.tokens[0, :n], out.tokens[0, :n])


def test_prompt_errors_name_the_argument(saved, model):
    untokenized = DeepseekModel(model.config, model.params)
    with pytest.raises(ValueError, match="prompts: got text, but there is no tokenizer"):
        generate(untokenized, TEXTS, max_new_tokens=2)
    with pytest.raises(ValueError, match=r"prompts\[1, 0\] = 500 is outside the vocabulary"):
        generate(model, [[1, 2], [500]], max_new_tokens=2)
    with pytest.raises(ValueError, match=r"max_new_tokens must be a positive int, got 2\.0"):
        generate(model, [[1, 2]], max_new_tokens=2.0)
    with pytest.raises(ValueError, match="max_new_tokens: missing"):
        generate(model, [[1, 2]])
    with pytest.raises(ValueError, match=r"prompts\[0\]: got no tokens"):
        generate(model, [[], [1]], max_new_tokens=2)


def test_hub_id_from_the_cache(saved, tmp_path):
    """A Hub id is read from huggingface_hub's cache layout; one not there (and no
    download allowed) names the cache folder."""
    pytest.importorskip("huggingface_hub")
    _, folder, _, _ = saved
    repo = tmp_path / "models--tiny-org--tiny-v2"
    commit = "0" * 40
    shutil.copytree(folder, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    model = load_checkpoint("tiny-org/tiny-v2", cache_dir=tmp_path, local_files_only=True)
    assert model.tokenizer is not None and model.path.name == commit
    with pytest.raises(ValueError, match=f"not in the Hugging Face cache '{tmp_path}'"):
        load_checkpoint("tiny-org/missing", cache_dir=tmp_path, local_files_only=True)
    with pytest.raises(ValueError, match="neither a folder nor a Hugging Face Hub id"):
        load_checkpoint(tmp_path / "no" / "such" / "folder")
