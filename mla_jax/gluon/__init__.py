"""Hopper (sm_90) Gluon stage-1 kernels, one module per family: ``seesaw`` (64-head
tiles), ``narrow`` (16- and 32-head tiles, fp8 and 16-bit caches), ``fp8_mma`` (e4m3
MMAs, opt-in), with ``widen`` (fp8 to fp16 in registers) and ``common`` (what they
share). Which kernel runs, and its launch, is ``mla_jax.plan``'s choice; how each is
built and why is docs/kernels.md."""

# The kernels' geometry, here so that the plan reads it without importing a kernel
# module (defining a module's kernels parses their sources: tens of ms at import).
BLOCK_H = 64  # the seesaw's and the fp8-MMA kernel's head tile (the MMAs' M)
BLOCK_N = 64  # tokens a block: one warpgroup MMA's M or K
SMALL_BLOCK_H = 16  # the narrow kernels' tile where two 16-head tiles a row beat one of 32
LORA = 512
ROPE = 64
FP8 = "float8_e4m3fn"  # mla_jax.cache.FP8_DTYPE's name
