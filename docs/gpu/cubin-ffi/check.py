"""On the GPU: mla_decode through mla_jax's FFI handler (the cubin) and through
jaxlib's triton_kernel_call (the PTX, ptxas in this process), at shapes that run each
stage 1, against each other and against float64. Usage: check.py"""

import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import route

from mla_jax import mla_decode, reserve_logits_buffer
from mla_jax.cache import quantize_fp8
from mla_jax.reference import mla_decode_reference_np
from mla_jax.tools.problem import make_problem

# B, H, L, max_seq_len (None: a run-time length), cache: what stage 1 runs there
CASES = [
    (4, 128, 4096, None, "bf16"),  # the seesaw, its TMA scratch, stage 2
    (64, 64, 1024, 1024, "bf16"),  # the seesaw, a row's two splits in a cluster
    (16, 64, 1024, 1024, "bf16"),  # the 16-head kernel on 32-head tiles
    (64, 16, 4096, 4096, "bf16"),  # the 16-head kernel
    (1, 16, 1024, 1024, "bf16"),  # the tl kernel
    (8, 16, 4096, 4096, "fp8"),  # the fp8 16-head kernel
    (4, 128, 2048, 2048, "fp8"),  # the fp8 seesaw
]


def run(p, cache, scale, msl, k_scale):
    buf = reserve_logits_buffer(p.q.shape[0], p.q.shape[1], int(p.seq_lens.max()))
    f = jax.jit(
        lambda q, kv, bt, sl, buf: mla_decode(
            q, kv, bt, sl, buf, scale=scale, max_seq_len=msl, k_scale=k_scale, backend="triton"
        ),
        donate_argnums=4,
    )
    out, lse, _ = f(
        jnp.asarray(p.q), cache, jnp.asarray(p.block_table), jnp.asarray(p.seq_lens), buf
    )
    return np.asarray(out.astype(jnp.float32)), np.asarray(lse)


def rel_err(o, ref, live):
    return np.linalg.norm(o[live] - ref[live]) / np.linalg.norm(ref[live])


def main() -> None:
    results = []
    for B, H, L, msl, kind in CASES:
        p = make_problem(
            batch=B, num_heads=H, seq_lens=L, page_size=64, seed=B + H + L, empty_rows=int(B > 2)
        )
        kv = jnp.asarray(p.kv_cache)
        k_scale = None
        ref_kv = np.asarray(p.kv_cache, np.float64)
        if kind == "fp8":
            kv, k_scale = quantize_fp8(kv)
            ref_kv = np.asarray(kv.astype(jnp.float32), np.float64) * float(k_scale)
        ref_out, ref_lse = mla_decode_reference_np(
            p.q, ref_kv, p.block_table, p.seq_lens, scale=p.scale
        )
        results.append(((B, H, L, msl, kind), kv, k_scale, p, ref_out, ref_lse))
    outputs = {}
    for name in ("ffi", "jaxlib"):
        route.use(name)
        for case, kv, k_scale, p, *_ in results:
            t = time.perf_counter()
            outputs[name, case] = run(p, kv, p.scale, case[3], k_scale)
            print(f"{name:6} {case}: {time.perf_counter() - t:.2f} s (first call)", flush=True)
    bad = 0
    for case, _, _, p, ref_out, ref_lse in results:
        (oa, la), (ob, lb) = outputs["jaxlib", case], outputs["ffi", case]
        live = p.seq_lens > 0
        same = np.array_equal(oa, ob) and np.array_equal(la, lb)
        err_a, err_b = rel_err(oa, ref_out, live), rel_err(ob, ref_out, live)
        lse_err = np.abs(lb[live] - ref_lse[live]).max()
        ok = err_b < 2e-2 and lse_err < 2e-2 and np.all(ob[~live] == 0)
        bad += not ok
        print(
            f"{'PASS' if ok else 'FAIL'} {case}: routes bitwise {'equal' if same else 'DIFFERENT'}"
            f" (max |d out| {np.abs(oa - ob).max():.2e}); error vs float64: jaxlib"
            f" {err_a:.2e}, ffi {err_b:.2e}, lse {lse_err:.2e}"
        )
    print("ALL PASS" if not bad else f"{bad} FAILED")


if __name__ == "__main__":
    main()
