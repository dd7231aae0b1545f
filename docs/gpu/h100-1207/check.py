"""On the GPU: mla_decode at shapes that run every stage 1, bf16 and fp8 caches, by
whichever tree is on the path; writes the outputs to an .npz. ``compare`` then checks
two trees' files bitwise equal and against float64.

    python check.py run OUT.npz       # in each tree's process
    python check.py compare A.npz B.npz
"""

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

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


def problem(case):
    from mla_jax.cache import quantize_fp8
    from mla_jax.tools.problem import make_problem

    B, H, L, _, kind = case
    p = make_problem(
        batch=B, num_heads=H, seq_lens=L, page_size=64, seed=B + H + L, empty_rows=int(B > 2)
    )
    kv, k_scale = jnp.asarray(p.kv_cache), None
    if kind == "fp8":
        kv, k_scale = quantize_fp8(kv)
    return p, kv, k_scale


def run(path: str) -> None:
    from mla_jax import mla_decode, reserve_logits_buffer

    saved = {}
    for case in CASES:
        p, kv, k_scale = problem(case)
        buf = reserve_logits_buffer(p.q.shape[0], p.q.shape[1], int(p.seq_lens.max()))
        f = jax.jit(
            lambda q, kv, bt, sl, buf, k_scale=k_scale, msl=case[3], s=p.scale: mla_decode(
                q, kv, bt, sl, buf, scale=s, max_seq_len=msl, k_scale=k_scale, backend="triton"
            ),
            donate_argnums=4,
        )
        t = time.perf_counter()
        out, lse, _ = f(
            jnp.asarray(p.q), kv, jnp.asarray(p.block_table), jnp.asarray(p.seq_lens), buf
        )
        saved[f"{case}/out"] = np.asarray(out.astype(jnp.float32))
        saved[f"{case}/lse"] = np.asarray(lse)
        print(f"{case}: {time.perf_counter() - t:.2f} s (first call)", flush=True)
    np.savez(path, **saved)


def compare(a_path: str, b_path: str) -> int:
    from mla_jax.reference import mla_decode_reference_np

    a, b = np.load(a_path), np.load(b_path)
    bad = 0
    for case in CASES:
        p, kv, k_scale = problem(case)
        ref_kv = np.asarray(kv.astype(jnp.float32), np.float64)
        if k_scale is not None:
            ref_kv = ref_kv * float(k_scale)
        ref_out, ref_lse = mla_decode_reference_np(
            p.q, ref_kv, p.block_table, p.seq_lens, scale=p.scale
        )
        live = p.seq_lens > 0
        oa, la, ob, lb = (x[f"{case}/{k}"] for x in (a, b) for k in ("out", "lse"))
        same = np.array_equal(oa, ob) and np.array_equal(la, lb)
        err = [
            np.linalg.norm(o[live] - ref_out[live]) / np.linalg.norm(ref_out[live])
            for o in (oa, ob)
        ]
        lse_err = np.abs(lb[live] - ref_lse[live]).max()
        ok = same and max(err) < 1e-2 and lse_err < 1e-3
        bad += not ok
        print(
            f"{'PASS' if ok else 'FAIL'} {case}: bitwise equal {same} (max |d out| "
            f"{np.abs(oa - ob).max():.2e}); error vs float64: A {err[0]:.2e}, B {err[1]:.2e}, "
            f"lse {lse_err:.2e}"
        )
    print("ALL PASS" if not bad else f"{bad} FAILED")
    return int(bad > 0)


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(sys.argv[2])
    else:
        sys.exit(compare(sys.argv[2], sys.argv[3]))
