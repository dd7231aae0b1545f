"""Hopper (sm_90) Gluon stage-1 kernels, one module per family: ``seesaw`` (64-head
tiles), ``narrow`` (16- and 32-head tiles, fp8 and 16-bit caches), ``fp8_mma`` (e4m3
MMAs, opt-in), with ``widen`` (fp8 to fp16 in registers) and ``common`` (what they
share). Which kernel runs, and its launch, is ``mla_jax.plan``'s choice; how each is
built and why is docs/kernels.md."""
