"""On the GPU: a jitted chain of 20 mla_decode calls at B=1 (the buffer threaded and
donated, every call's lse an output): wall time per call, and the compiled program's
command buffers with the kernel launches XLA captured in them.

    python chain.py TARGET      # the custom call the kernels of this tree lower to
"""

import re
import statistics
import sys
import time

import jax
import jax.numpy as jnp

from mla_jax import mla_decode, reserve_logits_buffer
from mla_jax.tools.bench import timed_chain
from mla_jax.tools.problem import make_problem

CALLS = 20


def computations(hlo: str) -> dict[str, str]:
    """``{name: body}`` of a compiled HLO module's text."""
    found, name, body = {}, None, []
    for line in hlo.splitlines():
        head = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line)
        if head and not line.startswith(" "):
            name, body = head[1], []
        elif line == "}" and name:
            found[name] = "\n".join(body)
            name = None
        elif name:
            body.append(line)
    return found


def main(target: str) -> None:
    for B, H, L in [(1, 16, 1024), (1, 16, 4096), (1, 128, 4096)]:
        p = make_problem(batch=B, num_heads=H, seq_lens=L, page_size=64, seed=H + L)
        buf = reserve_logits_buffer(B, H, L)
        decode = lambda q, kv, bt, sl, buf, s=p.scale: mla_decode(
            q, kv, bt, sl, buf, scale=s, backend="triton"
        )
        chain = timed_chain(decode, CALLS, perturb_table=False, keep_outs=False)
        args = [jnp.asarray(x) for x in (p.q, p.kv_cache, p.block_table, p.seq_lens)]
        hlo = chain.lower(*args, buf).compile().as_text()
        launches = len(re.findall(rf'custom_call_target="{target}"', hlo))
        buffers = {n: b for n, b in computations(hlo).items() if "command_buffer" in n}
        captured = sum(
            len(re.findall(rf'custom_call_target="{target}"', b)) for b in buffers.values()
        )
        outs, lses, buf = chain(*args, buf)  # compile and warm up
        jax.block_until_ready((outs, lses, buf))
        times = []
        for _ in range(30):
            t = time.perf_counter()
            outs, lses, buf = chain(*args, buf)
            jax.block_until_ready((outs, lses, buf))
            times.append((time.perf_counter() - t) * 1e3 / CALLS)
        finite = all(bool(jnp.isfinite(x).all()) for x in lses)  # every call's results read
        print(
            f"B={B} H={H} L={L}: {launches} {target} launches, {captured} of them in "
            f"{len(buffers)} command buffer(s) ({hlo.count('command_buffer')} mentions); "
            f"wall {statistics.median(times):.4f} ms a call "
            f"(median of 30 chains of {CALLS}; min {min(times):.4f}); every lse finite: {finite}",
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1])
