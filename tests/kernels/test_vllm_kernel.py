"""Loading vLLM's Triton MLA decode file without vLLM, and vllm_decode's arguments."""

import inspect
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from mla_jax.reference import mla_decode_reference_np
from mla_jax.tools import vllm_kernel
from tests.cases import DEEPSEEK, random_case

ROOT = Path(__file__).resolve().parents[2]
REAL_FILE = Path(
    os.environ.get(vllm_kernel.ENV_VAR) or ROOT / ".vllm" / "triton_decode_attention.py"
)
needs_real_file = pytest.mark.skipif(
    not REAL_FILE.is_file(),
    reason=f"no copy of vLLM's kernel at {REAL_FILE} (see "
    "mla_jax/tools/vllm_kernel.py for how to get it)",
)

# A miniature of the real file: its vllm imports, a Triton kernel, the entry point.
FAKE_KERNEL = """
import logging

import torch
from vllm.platforms import current_platform
from vllm.triton_utils import (
    tl,
    triton,
)

is_hip_ = current_platform.is_rocm()
logger = logging.getLogger(__name__)


@triton.jit
def _copy(x_ptr, y_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs))


def decode_attention_fwd(*args, **kwargs):
    return "called"
"""


def test_load_without_a_path_is_none(monkeypatch, tmp_path):
    monkeypatch.delenv(vllm_kernel.ENV_VAR, raising=False)
    assert vllm_kernel.load() is None
    assert vllm_kernel.load(tmp_path / "missing.py") is None
    monkeypatch.setenv(vllm_kernel.ENV_VAR, str(tmp_path / "missing.py"))
    assert vllm_kernel.load() is None


def test_patch_source_replaces_vllm_imports_and_names_unknown_ones():
    patched = vllm_kernel.patch_source(FAKE_KERNEL)
    assert "vllm" not in patched.replace("mla_jax stand-in for vllm", "")
    assert "import triton\n" in patched and "import triton.language as tl\n" in patched
    aliased = vllm_kernel.patch_source("from vllm.triton_utils import triton as tt\n")
    assert "import triton\ntt = triton" in aliased
    with pytest.raises(ValueError, match=r"from vllm\.envs import VLLM_X"):
        vllm_kernel.patch_source(FAKE_KERNEL + "from vllm.envs import VLLM_X\n")
    with pytest.raises(ValueError, match=r"import vllm\.envs"):
        vllm_kernel.patch_source(FAKE_KERNEL + "import vllm.envs\n")


def test_load_imports_the_patched_file(tmp_path, monkeypatch):
    source = tmp_path / "triton_decode_attention.py"
    source.write_text(FAKE_KERNEL)
    monkeypatch.setenv(vllm_kernel.ENV_VAR, str(source))
    module = vllm_kernel.load()
    assert module.decode_attention_fwd() == "called"
    assert module.is_hip_ is False
    # A real file next to the copy, so Triton's @jit can read its source back.
    assert Path(module.__file__).parent == tmp_path and Path(module.__file__).is_file()
    assert "def _copy(x_ptr" in inspect.getsource(module._copy.fn)
    assert vllm_kernel.load(source) is module  # the same source: the same module
    assert source.read_text() == FAKE_KERNEL  # the copy itself is untouched


@needs_real_file
def test_real_file_loads_with_the_signature_vllm_decode_calls():
    module = vllm_kernel.load(REAL_FILE)
    params = list(inspect.signature(module.decode_attention_fwd).parameters)
    assert params == [
        "q",
        "k_buffer",
        "v_buffer",
        "o",
        "lse",
        "req_to_token",
        "b_seq_len",
        "attn_logits",
        "num_kv_splits",
        "sm_scale",
        "page_size",
        "logit_cap",
        "k_scale",
        "v_scale",
        "is_mla",
    ]


def _case(batch=3, heads=16, page_size=16):
    rng = np.random.default_rng(0)
    return random_case(
        rng,
        batch=batch,
        heads=heads,
        dims=DEEPSEEK,
        page_size=page_size,
        pages_per_seq=5,
        seq_lens=[80, 1, 37][:batch],
    )


def _torch(case):
    return (
        torch.from_numpy(case.q),
        torch.from_numpy(case.kv_cache),
        torch.from_numpy(case.block_table),
        torch.from_numpy(case.seq_lens),
    )


def test_vllm_decode_passes_what_forward_mqa_passes():
    case = _case()
    q, kv_cache, block_table, seq_lens = _torch(case)
    calls = []

    def decode_attention_fwd(*args, **kwargs):
        calls.append((args, kwargs))

    scale_t = torch.tensor(0.5)
    fake = type("Fake", (), {"decode_attention_fwd": staticmethod(decode_attention_fwd)})
    out, lse = vllm_kernel.vllm_decode(
        fake, q, kv_cache, block_table, seq_lens, scale=case.scale, num_kv_splits=4, k_scale=scale_t
    )
    ((args, kwargs),) = calls
    q_, k, v, o, lse_, req_to_token, b_seq_len, attn_logits, splits, sm_scale, page = args
    assert q_ is q and req_to_token is block_table and b_seq_len is seq_lens
    assert k.shape == (kv_cache.shape[0], 16, 1, 576) and k.data_ptr() == kv_cache.data_ptr()
    assert v.shape == (kv_cache.shape[0], 16, 1, 512) and v.data_ptr() == kv_cache.data_ptr()
    assert v.stride() == k.stride()  # a view of the same rows, as vLLM passes it
    assert o is out and o.shape == (3, 16, 512) and o.dtype == q.dtype
    assert lse_ is lse and lse.shape == (3, 16) and lse.dtype == q.dtype
    assert attn_logits.shape == (3, 16, 4, 513) and attn_logits.dtype == torch.float32
    assert (splits, sm_scale, page) == (4, case.scale, 16)
    assert kwargs["logit_cap"] == 0.0 and kwargs["is_mla"] is True
    assert kwargs["k_scale"] is scale_t
    assert kwargs["v_scale"].shape == () and kwargs["v_scale"].item() == 1.0


def test_vllm_decode_checks_shapes():
    q, kv_cache, block_table, seq_lens = _torch(_case())
    mod = vllm_kernel.torch_reference_module()
    with pytest.raises(ValueError, match="kv_cache"):
        vllm_kernel.vllm_decode(
            mod, q, kv_cache[..., :512], block_table, seq_lens, scale=0.1, num_kv_splits=1
        )
    with pytest.raises(ValueError, match="batch 3"):
        vllm_kernel.vllm_decode(
            mod, q, kv_cache, block_table[:2], seq_lens, scale=0.1, num_kv_splits=1
        )


def test_torch_stand_in_matches_the_reference():
    case = _case()
    out, lse = vllm_kernel.vllm_decode(
        vllm_kernel.torch_reference_module(), *_torch(case), scale=case.scale, num_kv_splits=2
    )
    ref_out, ref_lse = mla_decode_reference_np(
        case.q, case.kv_cache, case.block_table, case.seq_lens, scale=case.scale
    )
    np.testing.assert_allclose(out.numpy(), ref_out, atol=2e-5)
    np.testing.assert_allclose(lse.numpy(), ref_lse, atol=2e-5)


INTERPRETED = textwrap.dedent("""
    import numpy as np, torch
    from tests.cases import DEEPSEEK, random_case
    from mla_jax.tools import vllm_kernel
    from mla_jax.reference import mla_decode_reference_np

    case = random_case(np.random.default_rng(1), batch=3, heads=16, dims=DEEPSEEK,
                       page_size=16, pages_per_seq=5, seq_lens=[80, 1, 37])
    out, lse = vllm_kernel.vllm_decode(
        vllm_kernel.load({path!r}), torch.from_numpy(case.q), torch.from_numpy(case.kv_cache),
        torch.from_numpy(case.block_table), torch.from_numpy(case.seq_lens),
        scale=case.scale, num_kv_splits=4)
    ref_out, ref_lse = mla_decode_reference_np(case.q, case.kv_cache, case.block_table,
                                               case.seq_lens, scale=case.scale)
    np.testing.assert_allclose(out.numpy(), ref_out, atol=2e-5)
    np.testing.assert_allclose(lse.numpy(), ref_lse, atol=2e-5)
""")


@needs_real_file
@pytest.mark.interpreter
def test_real_kernel_in_the_interpreter_matches_the_reference():
    """vLLM's own kernel (float32, Triton interpreter) through vllm_decode: the
    arguments mean to it what they mean to the reference."""
    script = INTERPRETED.format(path=str(REAL_FILE))
    # TRITON_INTERPRET before triton defines any kernel; the repository on the path so
    # the child imports the package ``tests`` as the suite does.
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": pythonpath}
    result = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]


def test_triton_cache_dir_survives_jax_triton(monkeypatch):
    """jax_triton empties TRITON_CACHE_DIR on import (mla_jax no longer imports it, a
    caller may); vLLM's launch needs one."""
    from triton import knobs

    monkeypatch.setenv("TRITON_CACHE_DIR", "")  # what jax_triton's import leaves
    monkeypatch.setattr(knobs.cache, "dir", None, raising=False)
    assert not knobs.cache.dir
    vllm_kernel.ensure_triton_cache_dir()
    assert knobs.cache.dir and knobs.cache.dir.endswith("cache")
