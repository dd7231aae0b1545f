"""On the CPU: are two trees' kernels the same machine code at the sweep's shapes?

``lower`` lowers ``mla_decode`` for sm_90 as the bench calls it (a static
``max_seq_len``, the occupancy buffer for 132 SMs, bf16; the fp8 part's shapes on the
fp8 cache, both fp8 paths) at every shape of ``docs/benchmarks/results.json``, by
whichever tree is on the path, so its builds land in ``TRITON_CACHE_DIR``. ``compare``
then pairs two such folders' cubins by kernel name and checks that every build of the
second has a build of the first with the same SASS (every instruction with its
encoding and control word, from ``tests.kernel_calls.sass``: Triton's bundled
``cuobjdump``), warps and shared memory; run it from the repository's root.

    TRITON_CACHE_DIR=/tmp/new python sass_identity.py lower          # this tree
    (cd .ab/old && TRITON_CACHE_DIR=/tmp/old python .../sass_identity.py lower)
    PYTHONPATH=. python docs/gpu/h100-1207/sass_identity.py compare /tmp/old /tmp/new
"""

import collections
import glob
import json
import os
import sys
from pathlib import Path

SHAPES = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "results.json")
FP8 = [(128, 16, 16384), (128, 128, 16384)]


def lower() -> None:
    import jax
    import jax.numpy as jnp

    from mla_jax import mla_decode, reserve_logits_buffer
    from mla_jax.cache import quantize_fp8

    spec = jax.ShapeDtypeStruct
    shapes = [(s["B"], s["H"], s["L"]) for s in json.loads(Path(SHAPES).read_text())["shapes"]]
    runs = [(shape, "bf16", False) for shape in shapes]
    runs += [(shape, "fp8", mma) for shape in FP8 for mma in (False, True)]
    for (B, H, L), cache, mma in runs:
        buf = reserve_logits_buffer(B, H, L, sm_count=132, policy="occupancy")
        kv = spec((B * L // 64, 64, 576), jnp.bfloat16)
        if cache == "fp8":
            kv = jax.eval_shape(quantize_fp8, kv)
        args = (
            spec((B, H, 576), jnp.bfloat16),
            kv,
            spec((B, L // 64), jnp.int32),
            spec((B,), jnp.int32),
            jax.tree.map(lambda a: spec(a.shape, a.dtype), buf),
        )

        def step(q, kv, bt, sl, buf, L=L, mma=mma):
            if isinstance(kv, tuple):
                kv, k_scale = kv
            else:
                k_scale = None
            return mla_decode(
                q, kv, bt, sl, buf, scale=0.1, max_seq_len=L, k_scale=k_scale,
                backend="triton", compute_capability=90, fp8_mma=mma,
            )  # fmt: skip

        jax.jit(step, donate_argnums=4).trace(*args).lower(lowering_platforms=("cuda",))
    print(f"lowered {len(runs)} calls")


def builds(root: str) -> dict[str, collections.Counter]:
    from tests.kernel_calls import sass

    found: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for cubin in glob.glob(f"{root}/*/*.cubin"):
        meta = json.loads(Path(cubin[: -len(".cubin")] + ".json").read_text())
        text = sass(Path(cubin).read_bytes())
        code = "\n".join(line.strip() for line in text.splitlines() if "/* 0x" in line)
        found[os.path.basename(cubin)[: -len(".cubin")]][
            (code, meta["num_warps"], meta["shared"])
        ] += 1
    return found


def compare(old_root: str, new_root: str) -> None:
    old, new = builds(old_root), builds(new_root)
    same = True
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name, collections.Counter()), new.get(name, collections.Counter())
        matched = sum(min(n, a[k]) for k, n in b.items())
        same &= matched == sum(b.values()) == sum(a.values())
        print(
            f"{name}: OLD {sum(a.values())} builds, NEW {sum(b.values())}; NEW's with an "
            f"identical OLD build (SASS with encodings, warps, shared): {matched}"
        )
    print("ALL IDENTICAL" if same else "DIFFERENT")


if __name__ == "__main__":
    if sys.argv[1:2] == ["lower"]:
        lower()
    elif sys.argv[1:2] == ["compare"] and len(sys.argv) == 4:
        compare(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
