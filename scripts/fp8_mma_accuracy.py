"""How far from float64 an fp8-MMA decode would be, simulated in numpy (no GPU).

What ``mla_decode(..., fp8_mma=True)`` trades (docs/performance.md, "fp8 MMAs"): fp8
MMAs on an fp8 cache mean q (for S = Q K^T) and P (for O = P V) in e4m3 too. This
script rounds each operand as such a kernel does and measures the result against
float64 on the dequantised cache, with the metric of
``tests/gpu/test_gpu.py`` (``||out - ref|| / ||ref||``, bf16 bound 1e-2; lse absolute),
next to the current fp8 path (16-bit MMAs: q as given, P in q's dtype). The softmax is
taken as the kernels take it: 64-token blocks, base 2, the running max moved only when
a row grows past it by ``2^RESCALE_THRESHOLD`` (so P stays under 2^8, inside e4m3's
range).

Variants (``VARIANTS``):
  current    q bf16, P bf16 (the Gluon fp8 kernels' MMAs are 16-bit)
  fp8-qk     q in e4m3 (one scale a head: its amax / 448), P bf16
  fp8-qk-pv  q and P in e4m3 (P's row sum taken before rounding, as FlashAttention-3's
             fp8 path does)
  fp8-l-rnd  the same, the row sum taken from the rounded P (what the fp8-MMA kernel
             does)
  fp8-pv     q bf16, P in e4m3 (row sum of the rounded P): P's share alone
  fp8-qk2    q as two e4m3 terms, q_hi + q_lo / 16 (q_hi its e4m3 rounding, q_lo that
             of 16 times what is left; two S MMAs), P in e4m3 (row sum of the
             rounded P)
  fp8-qk2-pv2  q and P each as two e4m3 terms (P_hi + P_lo / 16; two PV MMAs), the
             row sum of the two-term P: every MMA in fp8, twice fp8-l-rnd's MMAs
  fp8-x2     the same with the low terms unscaled (q_lo the e4m3 rounding of what q_hi
             leaves, P_lo of what P_hi leaves), so that each pair of MMAs accumulates
             into one accumulator
  fp8-x2-t4  fp8-x2 with P times 16 under a lazy-rescale threshold of 4 (P then at
             most 2^8, inside e4m3's range), so that P's low terms stay out of e4m3's
             subnormals; the factor leaves with the row sum
  fp8-x2-t2  the same, P times 64 under a threshold of 2
``--acc-bits N`` also rounds S's running sum to N significant bits after each 32-deep
step, a pessimistic model of the fp8 tensor cores' accumulator (DeepSeek-V3's report
puts it at about 14 bits on the H800).

    python scripts/fp8_mma_accuracy.py [--length 4096] [--heads 32] [--acc-bits 14]
"""

from __future__ import annotations

import argparse

import ml_dtypes
import numpy as np

from mla_jax.reference import mla_decode_reference_np

E4M3 = ml_dtypes.float8_e4m3fn
BF16 = ml_dtypes.bfloat16
E4M3_MAX = 448.0
LORA, ROPE, BLOCK = 512, 64, 64
RESCALE_THRESHOLD = 8.0  # mla_jax.kernels.RESCALE_THRESHOLD
VARIANTS = (
    "current",
    "fp8-qk",
    "fp8-qk-pv",
    "fp8-l-rnd",
    "fp8-pv",
    "fp8-qk2",
    "fp8-qk2-pv2",
    "fp8-x2",
    "fp8-x2-t4",
    "fp8-x2-t2",
)
# The lazy rescale's threshold and P's factor of a variant (``RESCALE_THRESHOLD`` and 1
# where not named).
P_SCALING = {"fp8-x2-t4": (4.0, 16.0), "fp8-x2-t2": (2.0, 64.0)}


def to(x: np.ndarray, dtype) -> np.ndarray:
    """``x`` rounded to ``dtype`` (round to nearest even), back in float64."""
    return x.astype(dtype).astype(np.float64)


def round_bits(x: np.ndarray, bits: int) -> np.ndarray:
    """``x`` rounded to ``bits`` significant bits (nearest)."""
    mant, exp = np.frexp(x)
    return np.ldexp(np.round(mant * 2.0**bits) / 2.0**bits, exp)


def quantize_per_head(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """q ``[H, D]`` in e4m3 with one scale a head (its amax / 448): (values, scales)."""
    scale = np.abs(q).max(axis=1, keepdims=True) / E4M3_MAX
    return to(q / scale, E4M3), scale


def logits(q: np.ndarray, k: np.ndarray, acc_bits: int | None) -> np.ndarray:
    """``q @ k.T`` over the 576 dims, with the running sum rounded after each 32-deep
    step when ``acc_bits``."""
    if acc_bits is None:
        return q @ k.T
    s = np.zeros((q.shape[0], k.shape[0]))
    for c in range(0, q.shape[1], 32):
        s = round_bits(s + q[:, c : c + 32] @ k[:, c : c + 32].T, acc_bits)
    return s


def decode(q, kv, scale, variant, acc_bits=None):
    """One row's decode ``[H, 576] x [L, 576]`` as ``variant`` rounds it: (out, lse)."""
    heads = q.shape[0]
    if variant in ("current", "fp8-pv"):
        qk, q_scale = to(q, BF16), np.ones((heads, 1))
    else:
        qk, q_scale = quantize_per_head(q)
    if variant in ("fp8-qk2", "fp8-qk2-pv2"):
        # S = (q_hi + q_lo / 16) K: the e4m3 rounding of 16 times the remainder.
        qk = qk + to((q / q_scale - qk) * 16.0, E4M3) / 16.0
    elif variant.startswith("fp8-x2"):
        qk = qk + to(q / q_scale - qk, E4M3)
    p_dtype = BF16 if variant in ("current", "fp8-qk") else E4M3
    row_sum_rounded = variant not in ("current", "fp8-qk", "fp8-qk-pv")
    qk_scale = scale * np.log2(np.e) * q_scale[:, 0]
    threshold, p_scale = P_SCALING.get(variant, (RESCALE_THRESHOLD, 1.0))
    m = np.full(heads, -np.inf)
    l_sum = np.zeros(heads)
    acc = np.zeros((heads, LORA))
    for n0 in range(0, kv.shape[0], BLOCK):
        blk = kv[n0 : n0 + BLOCK]
        bits = None if variant in ("current", "fp8-pv") else acc_bits
        s = logits(qk, blk, bits) * qk_scale[:, None]
        grow = s.max(axis=1) - m > threshold
        m_new = np.where(grow, s.max(axis=1), m)
        alpha = np.where(grow, np.exp2(m - m_new), 1.0)
        m = m_new
        p = np.exp2(s - m[:, None]) * p_scale
        p_r = to(p, p_dtype)
        if variant == "fp8-qk2-pv2":
            p_r = p_r + to((p - p_r) * 16.0, E4M3) / 16.0
        elif variant.startswith("fp8-x2"):
            p_r = p_r + to(p - p_r, E4M3)
        l_sum = l_sum * alpha + (p_r if row_sum_rounded else p).sum(axis=1)
        acc = acc * alpha[:, None] + p_r @ blk[:, :LORA]
    return acc / l_sum[:, None], (m + np.log2(l_sum / p_scale)) * np.log(2)


def make_row(rng, heads, length, outliers):
    """q (bf16 values) and an fp8 cache dequantised (float64) for one row; with
    ``outliers`` a few latent channels 10x larger, as activations often have."""
    q = rng.standard_normal((heads, LORA + ROPE))
    kv = rng.standard_normal((length, LORA + ROPE))
    if outliers:
        chans = rng.choice(LORA + ROPE, 8, replace=False)
        kv[:, chans] *= 10.0
        q[:, chans] *= 3.0
    k_scale = np.abs(kv).max() / E4M3_MAX
    return to(q, BF16), to(kv / k_scale, E4M3) * k_scale


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--length", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--acc-bits", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    scale = (128 + ROPE) ** -0.5  # DeepSeek's softmax scale (qk_nope 128 + rope 64)
    for outliers in (False, True):
        rng = np.random.default_rng(args.seed)
        errs = {v: [] for v in VARIANTS}
        for _ in range(args.rows):
            q, kv = make_row(rng, args.heads, args.length, outliers)
            # The row as one page of a one-row batch.
            ref_out, ref_lse = mla_decode_reference_np(
                q[None], kv[None], np.zeros((1, 1), np.int32), np.array([len(kv)]), scale=scale
            )
            ref_out, ref_lse = ref_out[0], ref_lse[0]
            for v in VARIANTS:
                out, lse = decode(q, kv, scale, v, args.acc_bits)
                rel = np.linalg.norm(out - ref_out) / np.linalg.norm(ref_out)
                errs[v].append((rel, np.abs(lse - ref_lse).max()))
        label = "outlier channels" if outliers else "normal"
        print(
            f"L={args.length} H={args.heads} rows={args.rows} {label}"
            f" acc_bits={args.acc_bits}: out rel. error (worst row), lse abs. error"
        )
        for v, e in errs.items():
            rel, lse = np.max(e, axis=0)
            print(f"  {v:10s} {rel:.2e} {lse:.2e}")


if __name__ == "__main__":
    main()
