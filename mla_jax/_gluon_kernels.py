"""Hopper (sm_90) Gluon versions of stage 1.

Same contract as ``kernels.mla_decode_stage1`` (same pointer arguments, grid, split
partition, clamps and output: the normalised partial ``acc / l * kv_scale`` in
columns ``[0, LORA)`` of the float32 buffer and the natural-log lse in column
``LORA``; empty splits write nothing), so ``kernels.mla_decode_stage2`` merges its
partials, but that the seesaw and the 16-bit 16-head kernel store a bf16 q's
partials in bf16, two to a float32 slot (``bf16_partials``; stage 2 told by
``stage2_params``); with one split, the output and lse themselves, as the tl kernel
writes them, and so does the seesaw where a cluster merges a row's two splits
(below). Four kernels (``kernel_for``): ``mla_decode_stage1_gluon_seesaw`` for
64-head tiles, on a 16-bit cache of q's dtype from 32 heads or a ``float8_e4m3fn``
one from 64; under those, 16-head tiles, ``mla_decode_stage1_gluon_h16`` on a 16-bit
cache (also where the step's tokens are known at trace time at exactly 32 heads, in a
small step two 16-head tiles a row, in a larger one one 32-head tile, and at 64 and
128 heads in small steps, two and four 32-head tiles: ``small_heads`` and
``small_block_h``) and ``mla_decode_stage1_gluon_fp8_h16`` on an fp8 one; and, only
where asked
(``mla_decode(..., fp8_mma=True)``), on an fp8 cache from 64 heads,
``mla_decode_stage1_gluon_fp8_mma``, which rounds q and P to e4m3 and multiplies on
the fp8 tensor cores (the last section below). What they support is ``supports``:
``LORA = 512``, ``ROPE = 64``, pages of a multiple of 64 tokens, at least 16 heads;
everything else stays with the tl kernel. All run online
softmax in base 2 with the tl kernel's lazy rescaling; with
lazy rescaling most blocks move no running max, so the kernels ask first (a vote) and
rescale only where one moves (``_cta_any``, ``_rescale_rows``): the result is the
same bit for bit, without the work that would multiply by 1.

The 16-head fp8 kernel, ``mla_decode_stage1_gluon_fp8_h16`` (grid ``(cdiv(H, 16), B,
splits)``, heads past ``H`` masked): at 16 heads an fp8 cache should make stage 1
memory-bound (B=128, L=16384 is 1.2 GB of fp8 latent), but a warpgroup MMA has M = 64
rows, so a 16-head tile in the 64-head kernels' formulation (heads on M) would pad 3/4
of every MMA and be compute-bound. So the products are transposed, tokens on M:

* ``S^T [64 tokens, 16 heads] = K [64, 576] Q^T [576, 16]``: 36 ``m64n16k16`` MMAs a
  block, B (Q^T: Q ``[16, 576]`` in shared memory seen transposed, K-major).
  ``O^T [512, 16] += V^T [512, 64] P^T [64, 16]``: 8 M-tiles of 64 latent dims, B is
  P^T, stored by the softmax; 32 MMAs. Both take A (K, V^T) from registers, widened
  from the block's fp8 words. No padding: 73 GFLOP at B=128, L=16384, against 292
  padded.
* One warpgroup (4 warps): ``O^T`` is 64 registers a thread, ``S^T`` 8. The softmax is
  per head, i.e. per column of ``S^T``: the column max is a reduction over the
  warpgroup's rows (within a thread, across the 8 lane groups by shuffles, across the
  4 warps through shared memory), so P^T is stored on the running max first and a CTA
  vote (``bar.red.or``, the barrier that publishes P^T) says whether any column grew
  past it by more than the threshold; only then the exact max, the rescale and P^T
  again (the first block, and rarely after); the column sum is kept as a per-thread
  ``[64, 16]`` partial and reduced once at the end. Lazy rescaling and base 2 as in
  the tl kernel; ``kv_scale`` folds into the softmax scale and the output.
* fp16 MMAs whatever q's dtype. e4m3 widens to fp16 exactly in one ``cvt`` for two
  values; to bf16 it takes an integer sequence (4 instructions for two values) or a
  slow scalar conversion (with bf16 MMAs a register-loading version of this kernel
  took 510 µs at 128/16/16384 against 466, ``docs/gpu/gluon-fp8-h16-variants-2.log``).
  Each head of bf16 q is scaled by a power of two that puts its largest finite
  magnitude in ``[2^14, 2^15)`` (``_copy_query_f16``: exact for every element within
  2^29 of it; NaN or inf in one head leaves the others alone) and its logits by the
  inverse; P (at most ``2^RESCALE_THRESHOLD``) is rounded to fp16's 11 significant bits
  instead of bf16's 8, so the partials are at least as close to float64 as with bf16
  MMAs (``docs/gpu/gluon-fp8-h16-check.log``).
* The ring: the fp8 block lands in shared memory as it is, as int32 words (4 values
  each), in two stages: block j + 1 copied (16-byte ``cp.async``, rows outside the split
  zero-filled; ``_ring_copy``) while block j is multiplied. No 16-bit copy of the block
  is stored: a block moves 36 KB into shared memory and reads 68 KB of it back as
  words.
* S^T's K: 9 chunks of 64 columns (8 latent, 1 rope) read from the ring by 16-byte
  shared loads, a thread holding 16 consecutive bytes of two rows 8 apart
  (``_CHUNK_WORDS_LAYOUT``), as wgmma's register operand places rows; each chunk's
  words read a chunk ahead of its widening, so that the load's latency passes under
  the MMA before; per chunk (``_qk_chunk``) widen, issue its MMAs with the widened
  registers as A, wait for the previous chunk's (so only two chunks' operands are
  pinned).
* Why that register A needs no data movement: the register operand gives lane c of a
  quad columns ``2c, 2c + 1, 2c + 8, 2c + 9`` of each 16-column k-step, the loads 16
  consecutive columns. The sum over columns is order-free, so the chunk's columns are
  taken in a permuted order (``_qk_operand``: ``16c + 4t + 2h + e`` to ``16t + 8h +
  2c + e``) that maps one layout onto the other inside each thread, and Q is stored
  with its columns in the same order (``_permuted_cols``).
* O^T's V^T: a latent pair (128 columns, one ``[64, 32]``-word allocation a stage) read
  one word a thread and token (``_PV_WORDS_LAYOUT``: word ``8w + q`` of the tokens
  wgmma's A operand gives lane ``4q + c``), two words (an even and an odd token)
  byte-permuted and widened into fp16 pairs, so that a thread's four latent dims of a
  word become its rows ``q``, ``q + 8`` of the pair's two M-tiles (``_pv_operands``):
  M-tile ``b`` row ``r`` is dim ``32 (r >> 4) + 4 (r & 7) + 2 b + ((r >> 3) & 1)`` of
  the pair, which the partials' staging puts back in order (``_pair_out``). The first
  two pairs' words are read while the softmax runs, each later pair's while the pair
  before is multiplied.
* Every layout change from loaded words to operand is a relabelling, checked at compile
  time (``convert_layout(..., assert_trivial=True)`` fails the build otherwise). A
  pair's 16-byte units are swizzled by row (``_RING_PAIR_LAYOUT``) so that neither read
  has bank conflicts; the rope columns (S^T only) need none.
* Per block: ``wait_group 0`` and one CTA barrier (every thread's copies landed; every
  warp past the other stage's reads and its PV MMAs); the page index two blocks ahead
  (issued after the copies, it would wait behind them in the load queue); the next
  block's copies into the other stage; the 9 S^T chunks, waited; the column softmax;
  P^T stored, fence + barrier (publishing P^T and, at the first block, Q); the 4 pairs'
  PV MMAs, each tile rescaled where the vote said so, waited. Q comes once, through
  registers (its columns permuted, in fp16).
* The partials leave through the ring, dead by then: each pair's two M-tiles, whose
  rows are permuted dims, are stored into it in the dims' order (``_stage_pair``) and
  read back by rows, so that a warp's store writes 32 consecutive dims of a head
  (``_store_pair``; stored from the accumulators, a warp store touches 8 dims four
  apart of 4 heads, four times the sectors).
* The views are indexed by an opaque 0 (``_opaque_zero``), as in the seesaw kernel:
  hoisted, the 68 MMAs' descriptors would take the register file.
* Shared memory: the ring 72 KB, Q 18 KB, P^T 2 KB: 94,464 bytes, so two CTAs share an
  SM (the occupancy split rule already assumes two 16-head programs an SM: B=128 at
  L=16384 is 256 CTAs, one wave), each with a block in flight while the other
  multiplies.
* The sm_90 build (``tests/test_gluon_build.py``): 232 registers (225 for fp16 q's
  one-split build), no spills, 68 HGMMA (``64x16x16``, all with a register A), 36
  16-byte cp.async (the first block and one a loop), no 16-byte global loads, 25
  16-byte shared stores (Q's 9, the partials' 16), 272 e4m3 cvt (K's 144, V^T's 128),
  2 CTA barriers in the loop: two CTAs an SM by registers (2 x 128 x 232 < 64K) and by
  shared memory.
* Not done (``docs/performance.md``, "The fp8 cache"): a producer warpgroup filling
  the ring (its one worker was the bottleneck); 32-head tiles (N = 32) would need 128
  accumulator registers a thread; fp8 MMAs (q quantised, an opt-in accuracy trade).

The 16-head kernel for a 16-bit cache, ``mla_decode_stage1_gluon_h16`` (grid as the
fp8 one's): the fp8 kernel's transposed products and column softmax, with nothing to
widen, so every MMA operand comes from shared memory.

* Each block (64 tokens x 576, 72 KB) lands by ``cp.async`` as the cache holds it
  (NVMMA 128-byte swizzle, the latent and rope columns apart; ``_copy_block_rows``)
  in one of two slots: block j + 1 in flight while block j is multiplied. Q stays in
  shared memory (18 KB), P^T 2 KB: 168,192 bytes, one CTA an SM.
* ``S^T [64 tokens, 16 heads] = K Q^T``: A is the slot (K-major), B is Q seen
  transposed; 36 ``m64n16k16`` MMAs. ``O^T [512, 16] += V^T P^T``: A is the slot's
  latent part seen transposed (M-major, which wgmma takes for 16-bit operands), B is
  P^T as the softmax stored it; one accumulator of 8 M-tiles (64 registers a
  thread), 32 MMAs.
* The softmax, the vote and the lazy rescaling are the fp8 kernel's, in q's dtype
  (no per-head scaling: the MMAs multiply q's own dtype).
* Per block: ``wait_group 0``, the proxy fence and one CTA barrier (the block landed;
  every warp past the other slot's MMAs), the page index two blocks ahead, the next
  block's copies into the other slot, S^T (waited), the softmax, P^T (fence +
  the vote's barrier), O^T (waited).
* Occupancy: one CTA an SM, where the tl kernel's 16-head tile runs two, so where the
  occupancy rule's grid holds more programs than SMs it takes half the rule's splits
  (``split_divisor``): one wave, each program with twice the tokens. Against the tl
  kernel at the rule's count, both stages: 4-19% faster at that count, up to 16%
  slower at the rule's own (``docs/performance.md``, "A Gluon stage 1 for a 16-bit
  cache at 16 heads"). At 32 heads two tiles a row (each reading the row's blocks)
  in a step of at most ``SMALL_HEADS_BATCH_TOKENS`` tokens, where a CTA's fixed
  chain, not the twice-read blocks, sets the time ("The 16-head kernel at 32 heads");
  in a larger step one 32-head tile a row (``BLOCK_H = 32``: N = 32, O^T 128
  registers a thread, 188,928 bytes, one CTA an SM as the occupancy rule counts the
  32-head programs it plans, so at the rule's count), where the seesaw ran ("A
  32-head tile"); at 64 heads two 32-head tiles a row in a step of at most
  ``SMALL_HEADS_BATCH_TOKENS`` tokens, at 128 four in one of at most
  ``WIDE_HEADS_BATCH_TOKENS``, at the count ``split_divisor`` gives ("32-head tiles
  at 64 and 128 heads").
* The partials (or the output with one split) are stored from a by-heads layout
  (``convert_layout`` through shared memory), so that a warp writes a head's
  consecutive dims; bf16 for a bf16 q where stage 2 merges them, as the tl kernel's.
* The sm_90 build (``tests/test_gluon_build.py``): 125 registers (128 with fp16 q),
  no spills, 68 HGMMA (``64x16x16``, from shared memory), 81 ``LDGSTS``, no global
  scratch.

The 64-head kernel, ``mla_decode_stage1_gluon_seesaw``: FlashMLA's "seesaw" schedule
(its 2025-04 deep dive) as far as Gluon on triton 3.6 goes, one CTA per (head tile,
row, split) as the tl kernel. It is launched with ``num_warps = 4``
(``launch_params``), the default partition; the build adds a 4-warp worker, 8 warps
in all.

* ``BLOCK_H = 64`` heads, ``BLOCK_N = 64`` tokens a block. A warpgroup MMA has M = 64
  rows, so 64 heads is its natural tile; 128 heads would need a 128 x 512 float32
  accumulator, 256 registers a thread at 8 warps, more than a thread may hold. The
  64 x 512 output accumulator is split by columns, 64 x 256 a warpgroup (128
  registers a thread).
* Q (64 x 512 + 64 x 64) stays in shared memory for the whole split; latent blocks
  (64 x 512 + 64 x 64) are double-buffered in shared memory, filled by TMA wherever a
  block of a 16-bit cache lies wholly inside the split (its descriptors made on the
  device, in the global scratch the launch route passes) and otherwise by
  ``cp.async``, which zero-fills the rows outside the split. A block serves as K (all
  576 columns, a transposed shared-memory view) and V (its first 512 columns) without
  a second copy.

* ``gl.warp_specialize`` gives each warpgroup its own code: warpgroup 0 is the
  default partition, warpgroup 1 the worker (256 registers each, ``setmaxnreg``).
  Blocks go by pairs: the even block in latent slot 0, the odd one in slot 1.
  Warpgroup 0 computes the whole S = Q K^T (64 x 64, N = 64 wgmmas: Q and K each read
  once from shared memory a block, where the split S read Q twice) of the even
  block and owns O_L (output columns 0-255); warpgroup 1 the odd block's S and O_R.
* Per pair, with m the running max (lazy rescaling as the tl kernel's):
  WG0: S0 (waits ready0) -> m0 = max(m, rowmax S0), scale0 = 2^(m - m0),
  P0 = 2^(S0 - m0) -> publishes m0 and P0 (p0 barrier) -> O_L = O_L scale0 + P0 V0_L
  (P0 from registers, async) -> waits m1 and P1 (p1 barrier) while that MMA runs ->
  O_L = O_L 2^(m0 - m1) + P1 V1_L (P1 from shared memory).
  WG1: S1 (waits ready1; runs with WG0's S0) -> waits m0/P0 -> issues O_R = O_R scale0
  + P0 V0_R (P0 from shared memory, async) -> m1 = max(m0, rowmax S1), scale1 =
  2^(m0 - m1), P1 = 2^(S1 - m1) (this softmax runs while WG0's P0 V0_L and its own
  P0 V0_R are on the tensor cores) -> publishes m1 and P1 -> O_R = O_R scale1 + P1 V1_R
  (P1 from registers; the refill of slot 0 is issued while it runs) -> refills slot 1.
  Both warpgroups apply every block in order, so each O half is always relative to
  the same m; a warp multiplies its O rows by a scale only when one of them is not 1
  (a warp vote, ``_rescale_rows``: 128 multiplies a thread saved in most blocks); the
  row sum is kept per warpgroup (its own blocks' P, rescaled the same way) and the two
  are added once at the end (one more exchange).
  Unlike FlashMLA's order, P0 needs no scale1 (WG1 rescales O_R between its two
  MMAs instead), so WG0 publishes P0 before WG1's softmax, not after.
* P of each block goes over that block's k_pe (64 x 64, the same shape and layout),
  dead once its QK^T is done: no P buffers. Shared memory: 72 KB Q + 2 x 72 KB
  latent + 1.5 KB m/l exchange + mbarriers = 222996 bytes, and 816 more in a split
  build for the partials' row offsets.
* A split's partials (64 x 256 float32 a warpgroup; bf16 for a bf16 q,
  ``bf16_partials``) go out through shared memory that is dead by then
  (``_store_tile``): warpgroup 0 stages its half in Q's latent part (warpgroup 1's
  last QK^T finished before it published its last P), warpgroup 1 in slot 0
  (warpgroup 0's last MMA finished before it arrived on l0). Stored from the
  accumulator's registers, a warp's store touches eight rows; read back by rows, it
  writes 128 consecutive bytes (64 in bf16). With one split the output (q's dtype,
  half the bytes) is stored from the registers: staged, it read 5% slower at
  128/128/4096.
* A row of two splits runs as one thread-block cluster of two CTAs (``CLUSTER``,
  ``cluster_size``; grid ``(tiles * 2, B, 1)``, split = x mod 2), which does stage 2's
  work itself (``_finish_split``): split s's warpgroup s merges the output columns it
  holds, the other warpgroup stores its columns to the buffer as above; one cluster
  barrier (release/acquire at cluster scope: the stores are visible to the other CTA
  after it); then each merging warpgroup reads the other split's columns and both
  lses back (from L2) and merges them with its own partial, staged in shared memory,
  with ``kernels.mla_decode_stage2``'s arithmetic (``_pair_merge``). No stage 2
  launch; half the partials stored and read back. The cluster is jaxlib's
  (``TritonKernel`` with ``num_ctas``, launched with cuLaunchKernelEx's cluster
  attribute); the kernel is built as a one-CTA program, so Triton lays out and masks
  nothing for the cluster, and a cluster's CTAs being co-scheduled is what makes the
  barrier safe (a grid-wide one would need every CTA resident).
* Handshakes (mbarriers; an arrive is a 128-thread named barrier then one thread's
  arrive, so everything the warpgroup did before it is released): ready0/1 (a block
  landed: the TMA copies' bytes, or each thread's ``cp.async.mbarrier.arrive`` then
  one arrival, ``_seesaw_copy_block``; the first two wait for Q too), p0 (WG0 ->
  WG1: m0 and P0), p1 (WG1 -> WG0: m1 and P1), free0/1 (WG0 ->
  WG1: WG0's MMAs on that slot are done; WG1, the slot's last user, then refills
  it; on an fp8 cache WG0 refills slot 0 and free0 is unused), vfree0 (fp8 cache,
  WG1 -> WG0: its P0 V0_R is done), l0/l1 (row sums). Every barrier completes once a
  pair, so pair i waits parity i & 1 (on an fp8 cache WG0 waits the next pair's
  ready0, parity (i + 1) & 1, in pair i); none can complete twice before its waiter
  looks (each next completion needs something the waiter itself does after its wait,
  e.g. p0's next needs slot 0's refill, issued by WG1 after it waited p0; on an fp8
  cache vfree0's next needs the next pair's p0, which WG0 publishes after its wait on
  vfree0). The m exchange is double-buffered by pair parity. Every
  reader of a generic-proxy write (cp.async, P stores) through wgmma runs
  ``fence_async_shared`` after its wait (and the P writer before its arrive).
* No CTA-wide barrier inside the loop: each warpgroup syncs itself (named 128-thread
  barriers) and the other through mbarriers. The sm_90 build: 255 registers, no
  spills, 88 HGMMA; every ``wgmma.wait_group`` is 0, the overlap being across
  warpgroups and, in each, across an mbarrier wait (WG0; on an fp8 cache WG0 waits
  its P0 V0_L first, for the refill that overwrites its operand, and keeps its P1
  V1_L in flight across the next even block's waits and widening), the softmax
  (WG1's P0 V0_R) or the refill's issue (WG1's P1 V1_R).
* The views of Q and the slots are indexed by an opaque 0 (``_opaque_zero``) inside
  the loop: with fixed views every wgmma descriptor is loop-invariant, LLVM hoists
  them all (Q's 36 alone are 72 registers) and ptxas spilled 920 bytes.
* Not done (and why): FlashMLA's finer pipelining. (1) With two 64-token slots the
  next pair's loads start only as each slot's last MMA ends: WG0's next S waits for
  slot 0's refill, issued after WG1's P0 V0_R (on a 16-bit cache), about two 64 x 256
  MMAs ahead of use; WG1's next S waits for slot 1's, issued at the very end of its
  pair (FlashMLA eases this with 9 per-64-column TMA barriers a block, so S starts on
  the first column tile; not tried). (2) No wgmma kept in flight past a
  ``wgmma.wait_group N > 0``: each warpgroup's accumulator must be rescaled between
  its two PV MMAs (the other order, FlashMLA's, would make WG0 wait for scale1
  before publishing P0) and at 255 registers there is no room for a second
  accumulator or for P0 in registers.

On an fp8 cache the seesaw multiplies in fp16 (``warpgroup_mma`` takes 16-bit operands
from shared memory; an fp8 one would need q quantised to fp8, and V K-major), so each
block is widened once, in its own slot:

* Every block comes by ``cp.async`` (``_seesaw_copy_block``): its 32 KB of latent fp8
  into the front half of its slot's latent part, by 64-column chunks, chunk-major (4
  KB each), its rope columns into 4 KB of rope staging of the slot's own. Besides
  that staging the shared memory is the 16-bit kernel's: Q and two slots.
* Slot 0's front half is read only by warpgroup 0 (its S0 and P0 V0_L), so on an fp8
  cache warpgroup 0 refills slot 0 itself as soon as its P0 V0_L is done, while
  warpgroup 1 does its softmax, with no wait on warpgroup 1; its widening, which
  writes the back half and k_pe (read by warpgroup 1's P0 V0_R), waits for warpgroup
  1's ``vfree0`` (a tenth barrier). Slot 1 is refilled by warpgroup 1 after
  ``free1``, as on a 16-bit cache.
* The warpgroup that takes a block's S widens it in place (``_widen_slot``) once it
  has landed: warpgroup 0 under its P1 V1_L of the pair before (the first block
  before the loop), so that its S0 starts with nothing to wait for; warpgroup 1
  after its ready barrier, before its QK^T. e4m3 to fp16 is exact and one
  ``cvt.rn.f16x2.e4m3x2`` for two values. The 16-bit chunk ``c`` is bytes
  ``[8c, 8c + 8)`` KB of the slot (a 64-column atom of the 128-byte swizzle), its fp8
  source ``[4c, 4c + 4)``: from chunk 7 down, chunks 7-4 land above every fp8 byte, 3
  and 2 over chunks 4-7's, 1 and 0 over 0-3's, so two warpgroup barriers order the
  stores after the loads they overwrite. The other warpgroup reads the widened block
  (its PV half) only after the P handshake of the same block, which the widening
  warpgroup publishes after its fence.
* bf16 q: warpgroup 0 rewrites Q in place as fp16 once it has landed
  (``_seesaw_q_f16``), each head scaled by the power of two that puts its largest
  finite magnitude in ``[2^14, 2^15)`` (``_copy_query_f16``'s rule: exact within 2^29
  of it; NaN or inf in one head leaves the others alone), and publishes each head's
  logit factor (the inverse, times ``qk_scale``) with a ninth barrier. P, rounded
  to fp16's 11 significant bits instead of bf16's 8, is at most
  ``2^RESCALE_THRESHOLD``. fp16 q needs no rewrite.
* The scale folds as in the tl kernel: ``qk_scale = SM_SCALE * log2(e) * kv_scale``
  and the partial output times ``kv_scale``. The sm_90 build (bf16 q, splits): 255
  registers, no spills, 88 HGMMA, 114 cp.async, 432 e4m3 cvt (three widening sites:
  before the loop and in each warpgroup's loop), 232,276 bytes of shared memory, no
  global scratch.
* Not done: hiding warpgroup 1's widening under an MMA. It runs before its block's
  QK^T, with no MMA of its own queued, and with warpgroup 0's widening is what
  separates this build's time from the 16-bit one's (``docs/performance.md``, "The
  fp8 cache" and its open leads).

The fp8-MMA kernel, ``mla_decode_stage1_gluon_fp8_mma`` (``fp8_mma=True``; grid and
``BLOCK_H`` as the seesaw's): no block is widened, because both products run on e4m3
operands, which costs accuracy (q's 3 mantissa bits: ``docs/performance.md``, "fp8
MMAs").

* 8 warps, no specialisation: both warpgroups run every step, synchronised by CTA
  barriers.
* Q: each head times ``448 / amax`` (its largest magnitude), rounded to e4m3, in
  shared memory (36 KB); its logits take ``amax / 448`` back with the softmax scale
  and ``kv_scale`` (``_copy_query_e4m3``).
* The ring: ``FP8_MMA_STAGES`` (5) stages of a block's fp8 rows as the cache holds
  them (NVMMA 128-byte swizzle, latent and rope apart), by ``cp.async``, a warp
  copying one token's 512 latent bytes; ``FP8_MMA_STAGES - 1`` blocks in flight.
  Shared memory: Q 36 KB, the ring 180 KB, P 4 KB: 225,792 bytes, one CTA an SM.
* S = Q K^T (``[64 heads, 64 tokens]``): e4m3 warpgroup MMAs with both operands from
  shared memory, K-major both (the cache's rows are K-major for K), the warpgroups
  32 tokens each (18 ``m64n32k32`` a warpgroup).
* The softmax by rows (heads), base 2, the tl kernel's lazy rescaling behind a CTA vote
  (``_cta_any``): P on the running max first, the exact max and P again only where a
  row grew past it by more than the threshold. P (at most ``2^RESCALE_THRESHOLD``,
  inside e4m3's range) is rounded to e4m3 and stored ``[heads, tokens]``; the row sum
  is of the rounded values, those the MMA multiplies.
* O^T (``[512 dims, 64 heads]``) += V^T P^T: an e4m3 MMA's operands are K-major, and
  V's reduction runs over tokens, which the cache's rows hold apart; so V^T is the A
  operand, from registers: each thread loads 8-byte words of V (``_VT_WORDS_LAYOUT``,
  loaded under S's MMAs) and the bytes are regrouped in registers into four tokens of
  one latent dim a register (``_vt_operands``: O^T row ``r`` of tile ``t`` is dim
  ``4 u(r) + t``, so that a word's four dims land in the four tiles); B is P seen
  K-major. Four ``[128, 64]`` tiles, 64 rows a warpgroup: 128 accumulator registers a
  thread; the per-head rescale multiplies columns.
* The partials leave through the dead ring as ``[heads, dims]`` in the dims' order (a
  relabelling of the tiles' registers), read back by rows.
* The sm_90 build (``tests/test_gluon_build.py``): 247 registers (238 one-split), no
  spills, 26 QGMMA a block (18 ``64x32x32`` from shared memory, 8 ``64x64x32`` with a
  register A), no 16-bit MMA, 45 16-byte ``cp.async``, 16 8-byte shared loads of V.
* Not done: any overlap inside the CTA beyond the copies (S, the softmax and PV run in
  turn; one CTA an SM by shared memory and registers).
"""

from __future__ import annotations

from typing import Any

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from mla_jax import _tiling, kernels

BLOCK_H = 64
BLOCK_N = 64
# The seesaw kernel is launched with its default partition's 4 warps, and its build
# adds the worker's 4 (its metadata says 8).
SEESAW_NUM_WARPS = 4
# The 16-head kernels (fp8 and 16-bit caches): one warpgroup, 16 heads (the MMAs' N).
SMALL_BLOCK_H = 16
SMALL_NUM_WARPS = 4
# The fp8-MMA kernel: two warpgroups, no specialisation; its ring's stages.
FP8_MMA_NUM_WARPS = 8
FP8_MMA_STAGES = gl.constexpr(5)
_E4M3_MAX = gl.constexpr(448.0)  # mla_jax.cache.FP8_MAX
# The seesaw worker's registers: 256, as the default partition (8 warps x 256 = the
# whole register file).
SEESAW_WORKER_REGS = gl.constexpr(256)
LORA = 512
ROPE = 64
SIXTEEN_BIT = ("bfloat16", "float16")
# At 32 heads on a 16-bit cache, the 16-head kernel (two tiles a row) where the step's
# rows together hold at most this many tokens (``batch_tokens``: the rows times the
# longest row, known at trace time), else the seesaw. On the H200, both stages at
# ``split_divisor``'s count against the stage 1 ``mla_decode`` ran there before (the
# seesaw, or the tl kernel under 128 tokens a split): 10-27% faster at the sweep's six
# H=32 shapes up to 16384 tokens (1, 4 rows at 1024 and 4096 tokens, 1 at 16384, 16 at
# 1024); at 65536 tokens from 7% faster (64/32/1024) to 3% slower (4/32/16384), and
# 13-31% slower at more (docs/performance.md, "The 16-head kernel at 32 heads").
# There the same kernel with one 32-head tile a row (``small_block_h``) at the
# occupancy rule's count against the seesaw: 4-10% faster at all 11 H=32 sweep shapes
# above 16384 tokens (docs/performance.md, "A 32-head tile"). At 64 heads the same
# bound: two 32-head tiles a row against the seesaw, 1-25% faster at all 15 shapes of
# at most 16384 tokens measured (8/64/2048 and 32/64/512 within 2%), 3-36% slower at 13
# of the 15 above (docs/performance.md, "32-head tiles at 64 and 128 heads").
SMALL_HEADS_BATCH_TOKENS = 16384
# At 128 heads, four 32-head tiles a row up to this many tokens: 6-24% faster than the
# seesaw at the four such shapes measured (1/128/1024, 1/128/4096, 2/128/2048,
# 4/128/1024), 15-19% slower at the four of 16384 tokens (same section).
WIDE_HEADS_BATCH_TOKENS = 4096
FP8 = "float8_e4m3fn"  # mla_jax.cache.FP8_DTYPE's name
# The tl kernels' constants, one definition (gl.constexpr is tl.constexpr).
_LOG2E = kernels._LOG2E
_LN2 = kernels._LN2
RESCALE_THRESHOLD = kernels.RESCALE_THRESHOLD
# The tl stage 1's constexprs that are its own choices (tiling, precision, the
# partials' dtype), not the problem's: a Gluon kernel makes its own or has none.
_TL_CHOICES = (
    "BLOCK_H",
    "BLOCK_N",
    "DOT_PRECISION",
    "PAGED_LOADS",
    "LORA_CHUNKS",
    "BF16_PARTIALS",
)
_CP_ASYNC_BYTES = 16


def supports(
    *,
    num_heads: int,
    page_size: int,
    kv_lora_rank: int,
    rope_dim: int,
    q_dtype: str,
    kv_dtype: str,
    kv_row_stride: int,
    kv_page_stride: int,
) -> bool:
    """Whether one of the Gluon kernels (``kernel_for(kv_dtype, num_heads)``) handles
    the problem (else use the tl kernel).

    ``q_dtype``/``kv_dtype`` are names (``"bfloat16"``, ``"float16"``, ...): q 16-bit,
    and the cache either of q's dtype or ``float8_e4m3fn`` (its scale passed as
    ``kv_scale``). Pages must hold whole 64-token blocks, and each latent row must
    start 16-byte aligned (``cp.async``, TMA and the fp8 loads move 16 bytes); the last
    dimension is assumed contiguous, and a 16-bit cache's pages back to back. Heads: on
    an fp8 cache at least ``SMALL_BLOCK_H`` (the 16-head kernel under ``BLOCK_H``); on
    a 16-bit one ``SMALL_BLOCK_H`` (the 16-bit 16-head kernel, whose split count
    ``split_divisor`` halves: at 17-31 heads the tl kernel's 32-head tile is already one
    program an SM, so there is no count to halve) or at least ``BLOCK_H // 2`` (at
    exactly that with the step's tokens known, ``small_heads``, the 16-head kernel
    again, two 16-head tiles a row or one 32-head tile, ``small_block_h``, and so at 64
    and 128 heads in small steps, on 32-head tiles); above the
    16-head kernels, the seesaw (a tile of 32-63 heads masks the rest
    of its 64 rows: it still does the same work 1.4-1.6x faster than the tl kernel's
    tile, ``docs/gpu/gluon-heads-32-48.log``).
    """
    if q_dtype not in SIXTEEN_BIT or kv_dtype not in (q_dtype, FP8):
        return False
    per_copy = _CP_ASYNC_BYTES // (1 if kv_dtype == FP8 else 2)  # elements in 16 bytes
    if kv_dtype == FP8:
        heads_ok = num_heads >= SMALL_BLOCK_H
    else:
        heads_ok = num_heads == SMALL_BLOCK_H or num_heads >= BLOCK_H // 2
    return (
        heads_ok
        and page_size % BLOCK_N == 0
        and kv_lora_rank == LORA
        and rope_dim == ROPE
        and kv_row_stride % per_copy == 0
        and kv_page_stride % per_copy == 0
        # The seesaw's TMA descriptors see the cache as rows of tokens.
        and (kv_dtype == FP8 or kv_page_stride == page_size * kv_row_stride)
    )


def small_heads(kv_dtype: str | None, num_heads: int, batch_tokens: int | None = None) -> bool:
    """Whether the problem runs a 16-head kernel (tokens on the MMAs' M): on an fp8
    cache (``kv_dtype`` a name) under ``BLOCK_H`` heads,
    ``mla_decode_stage1_gluon_fp8_h16``; on a 16-bit one (``kv_dtype`` its name, or
    None) ``mla_decode_stage1_gluon_h16`` (its tile: ``small_block_h``) under
    ``BLOCK_H // 2`` heads, and where ``batch_tokens`` (``_tiling.head_tile``'s: the
    step's rows times its longest row, known at trace time; None where it is not) is
    known at exactly ``BLOCK_H // 2`` heads, at ``BLOCK_H`` in a step of at most
    ``SMALL_HEADS_BATCH_TOKENS`` tokens and at ``2 * BLOCK_H`` in one of at most
    ``WIDE_HEADS_BATCH_TOKENS``."""
    if kv_dtype == FP8:
        return num_heads < BLOCK_H
    if num_heads < BLOCK_H // 2:
        return True
    if batch_tokens is None:
        return False
    if num_heads == BLOCK_H // 2:
        return True
    if num_heads == BLOCK_H:
        return batch_tokens <= SMALL_HEADS_BATCH_TOKENS
    return num_heads == 2 * BLOCK_H and batch_tokens <= WIDE_HEADS_BATCH_TOKENS


def small_block_h(kv_dtype: str | None, num_heads: int, batch_tokens: int | None = None) -> int:
    """The heads of a 16-head kernel's tile (where ``small_heads``): on a 16-bit cache
    ``BLOCK_H // 2`` from that many heads on (one 32-head tile a row at 32 heads, two at
    64, four at 128), but ``SMALL_BLOCK_H`` at 32 heads in a step of at most
    ``SMALL_HEADS_BATCH_TOKENS`` tokens (two 16-head tiles a row); on an fp8 cache and
    under 32 heads ``SMALL_BLOCK_H``."""
    if kv_dtype == FP8 or num_heads < BLOCK_H // 2:
        return SMALL_BLOCK_H
    two_small = num_heads == BLOCK_H // 2 and (
        batch_tokens is None or batch_tokens <= SMALL_HEADS_BATCH_TOKENS
    )
    return SMALL_BLOCK_H if two_small else BLOCK_H // 2


def split_divisor(kv_dtype: str | None, num_heads: int, batch_tokens: int | None = None) -> int:
    """How many times fewer splits than the occupancy rule plans the Gluon stage 1
    (``kernel_for``) may need: for the 16-bit 16-head kernel, which holds one CTA an SM
    (168-189 KB of shared memory), the waves its grid takes where the rule's grid fills
    one (``_tiling``: the tl kernel's tile, two 16-head programs an SM or one wider
    one): its tiles a row times the rule's programs an SM over the rule's tiles a row;
    2 at 16 heads, at 32 with 16-head tiles and at 64 above ``_tiling.SMALL_BATCH_TOKENS``
    tokens, else 1 (``_triton_backend.gluon_split_divisor`` applies it where the rule's
    grid holds more of its programs than SMs). 1 for the other kernels (the seesaw's
    64-head tile is the rule's; the fp8 16-head kernel holds two CTAs an SM). On the
    H200, the 16-head kernel at 16 heads at that count against the tl kernel at the
    rule's, both stages: 4-19% faster at 14 shapes; at the rule's count where the grid
    holds two programs an SM, up to 16% slower (``docs/performance.md``, "A Gluon stage
    1 for a 16-bit cache at 16 heads"). ``batch_tokens`` as in ``small_heads``."""
    if kv_dtype == FP8 or not small_heads(kv_dtype, num_heads, batch_tokens):
        return 1
    tiles = -(-num_heads // small_block_h(kv_dtype, num_heads, batch_tokens))
    resident = _tiling.programs_per_sm(num_heads, batch_tokens)
    return max(1, tiles * resident // _tiling.head_tiles(num_heads, batch_tokens))


def uses_fp8_mma(kv_dtype: str | None, num_heads: int, fp8_mma: bool) -> bool:
    """Whether the problem runs the fp8-MMA kernel (``mla_decode_stage1_gluon_fp8_mma``):
    asked for (``fp8_mma``), an fp8 cache (``kv_dtype`` a name) and at least
    ``BLOCK_H`` heads (under that, the 16-head fp8 kernel's tile, which multiplies in
    fp16, is the one that fits)."""
    return fp8_mma and kv_dtype == FP8 and num_heads >= BLOCK_H


def kernel_for(
    kv_dtype: str | None,
    num_heads: int = BLOCK_H,
    fp8_mma: bool = False,
    batch_tokens: int | None = None,
) -> Any:
    """The Gluon stage 1 for a cache of dtype ``kv_dtype`` (a name, as in ``supports``;
    None: a 16-bit cache) and ``num_heads`` query heads: the fp8-MMA kernel where
    ``uses_fp8_mma``, a 16-head kernel where ``small_heads`` (fp8 or 16-bit; with
    ``batch_tokens``), else the seesaw (a 16-bit cache of q's dtype or an fp8 one).
    All take the same arguments; ``launch_params`` gives each its launch."""
    if uses_fp8_mma(kv_dtype, num_heads, fp8_mma):
        return mla_decode_stage1_gluon_fp8_mma
    if small_heads(kv_dtype, num_heads, batch_tokens):
        if kv_dtype == FP8:
            return mla_decode_stage1_gluon_fp8_h16
        return mla_decode_stage1_gluon_h16
    return mla_decode_stage1_gluon_seesaw


def cluster_size(kernel: Any, grid_splits: int, merge: bool = True) -> int:
    """The CTAs of one cluster for the Gluon stage 1 ``kernel`` (``kernel_for``'s): 2
    where the seesaw runs a row in two splits, so that the pair merges them and no stage
    2 runs; else 1 (no cluster, stage 2 merges). Rows of 4 or 8 splits as clusters ran
    1.7-2x slower on the H200 (docs/performance.md, "A row's two splits merged in a
    cluster"). ``merge=False``: 1 (A/B runs against stage 2)."""
    seesaw = kernel is mla_decode_stage1_gluon_seesaw
    return 2 if merge and seesaw and grid_splits == 2 else 1


def bf16_partials(q_dtype: str, kernel: Any, grid_splits: int, cluster: int) -> bool:
    """Whether the Gluon stage 1 ``kernel`` (``kernel_for``'s) stores its partials in
    bf16, two to a float32 slot of the buffer (its ``BF16_PARTIALS``, stage 2's too):
    where the tl stage 1 would (``kernels.bf16_partials``: a bf16 q, more than one
    split) and stage 2 merges them (no ``cluster``), on a kernel that has the constexpr
    (the seesaw on either cache, the 16-bit 16-head kernel; the fp8 16-head and fp8-MMA
    kernels store float32)."""
    return (
        "BF16_PARTIALS" in kernel.arg_names
        and kernels.bf16_partials(q_dtype, grid_splits)
        and cluster == 1
    )


def stage2_params(stage2: dict | None, stage1: dict) -> dict | None:
    """``kernels.launch_params``' stage 2 (None with one split) for the partials of
    the Gluon stage 1 ``stage1`` (``launch_params``): None where its cluster merges
    the row's splits itself, ``BF16_PARTIALS`` where it stores them in bf16."""
    if stage2 is None or stage1["cluster"] > 1:
        return None
    flag = {"BF16_PARTIALS": stage1["bf16_partials"]}
    return stage2 | {"constexprs": stage2["constexprs"] | flag}


def launch_params(
    *,
    q_dtype: str,
    kv_dtype: str | None = None,
    fp8_mma: bool = False,
    cluster_merge: bool = True,
    batch_tokens: int | None = None,
    **problem: Any,
) -> dict:
    """Grid, options and constexprs of the Gluon stage 1 for a q of dtype ``q_dtype``
    (a numpy name: ``"bfloat16"``, ``"float16"``) and a cache of dtype ``kv_dtype``
    (``kernel_for(kv_dtype, num_heads, fp8_mma, batch_tokens)``; None: a 16-bit cache):
    ``problem`` is ``kernels.launch_params``' keywords but ``q_dtype``, ``config`` and
    ``batch_tokens``, which picks the Gluon kernel here (``small_heads``), not the tl
    tile. The problem's constexprs are the tl stage 1's (one definition), less its own
    choices; the buffer is the tl kernel's, so stage 2 is launched from
    ``kernels.launch_params``, adapted by ``stage2_params`` (none where ``cluster``,
    ``cluster_size`` with ``cluster_merge``, is 2; ``bf16_partials``). A cluster's
    grid holds its CTAs along x."""
    tl_stage1, _ = kernels.launch_params(**problem, q_dtype=q_dtype)
    heads, splits = problem["num_heads"], problem["grid_splits"]
    small = small_heads(kv_dtype, heads, batch_tokens)
    kernel = kernel_for(kv_dtype, heads, fp8_mma, batch_tokens)
    cluster = cluster_size(kernel, splits, cluster_merge)
    half = bf16_partials(q_dtype, kernel, splits, cluster)
    block_h = small_block_h(kv_dtype, heads, batch_tokens) if small else BLOCK_H
    if kernel is mla_decode_stage1_gluon_fp8_mma:
        num_warps = FP8_MMA_NUM_WARPS
    else:
        num_warps = SMALL_NUM_WARPS if small else SEESAW_NUM_WARPS
    constexprs = {k: v for k, v in tl_stage1["constexprs"].items() if k not in _TL_CHOICES} | {
        "BLOCK_H": block_h,
        "BLOCK_N": BLOCK_N,
    }
    tiles = triton.cdiv(heads, block_h)
    if kernel is mla_decode_stage1_gluon_seesaw:
        constexprs["CLUSTER"] = cluster
    if "BF16_PARTIALS" in kernel.arg_names:
        constexprs["BF16_PARTIALS"] = half
    if cluster > 1:
        grid = (tiles * cluster, problem["batch"], 1)
    else:
        grid = (tiles, problem["batch"], splits)
    return {
        "grid": grid,
        "cluster": cluster,
        "bf16_partials": half,
        "num_warps": num_warps,
        "num_stages": 1,
        "constexprs": constexprs,
    }


@gluon.jit
def _safe_page(page, NUM_PAGES: gl.constexpr):
    """A page index inside the cache, whatever the block table holds: one outside
    ``[0, NUM_PAGES)`` reads page 0, as in ``kernels._safe_page``."""
    return gl.where(page.to(gl.uint32) < NUM_PAGES, page, 0)


@gluon.jit
def _split_range(seq_lens_ptr, row, num_splits, split, CAPACITY: gl.constexpr):
    """``[start, end)`` of the split: the row's length clamped to the table's capacity,
    then vLLM's cdiv partition (``kernels._split_range``)."""
    seq_len = gl.minimum(gl.maximum(gl.load(seq_lens_ptr + row), 0), CAPACITY)
    per_split = (seq_len + num_splits - 1) // num_splits
    start = per_split * split
    end = gl.minimum(start + per_split, seq_len)
    return start, end


@gluon.jit
def _split_bounds(
    seq_lens_ptr, num_splits_ptr, row, split, ONE_SPLIT: gl.constexpr, CAPACITY: gl.constexpr
):
    """The program's split count and ``[start, end)`` (``_split_range``): the run-time
    count, or with ``ONE_SPLIT`` (a build that writes the output itself) one split, the
    whole row. Callers branch once after both loads (one memory round trip before the
    bounds are known): a split past the run-time count is empty."""
    if ONE_SPLIT:
        num_splits = 1
    else:
        num_splits = gl.load(num_splits_ptr)
    start, end = _split_range(seq_lens_ptr, row, num_splits, split, CAPACITY)
    return num_splits, start, end


@gluon.jit
def _copy_rows(smem, base, rows, row_mask, stride_row, COLS: gl.constexpr, layout: gl.constexpr):
    """``cp.async`` of ``len(rows)`` rows of ``COLS`` contiguous elements at
    ``base + rows * stride_row`` into ``smem``; masked rows are zero-filled."""
    cols = gl.arange(0, COLS, layout=gl.SliceLayout(0, layout))
    ptrs = base + rows[:, None] * stride_row + cols[None, :]
    async_copy.async_copy_global_to_shared(smem, ptrs, mask=row_mask[:, None])


@gluon.jit
def _copy_query(
    q_nope_dst,
    q_pe_dst,
    q_nope_ptr,
    q_pe_ptr,
    tile,
    row,
    NUM_HEADS: gl.constexpr,
    BLOCK_H: gl.constexpr,
    LORA: gl.constexpr,
    ROPE: gl.constexpr,
    QP_OFFSET: gl.constexpr,
    stride_qn_b: gl.constexpr,
    stride_qn_h: gl.constexpr,
    stride_qp_b: gl.constexpr,
    stride_qp_h: gl.constexpr,
    layout: gl.constexpr,
):
    """Issues the ``cp.async`` copies of the row's query tile (its nope and rope parts,
    heads past ``NUM_HEADS`` masked) into shared memory; commits no group."""
    heads = tile * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, layout))
    head_ok = heads < NUM_HEADS
    _copy_rows(
        q_nope_dst, q_nope_ptr + row * stride_qn_b, heads, head_ok, stride_qn_h, LORA, layout
    )
    q_pe_row = q_pe_ptr + row * stride_qp_b + QP_OFFSET
    _copy_rows(q_pe_dst, q_pe_row, heads, head_ok, stride_qp_h, ROPE, layout)


@gluon.jit
def _head_rows(
    out_ptr,
    row,
    heads,
    split,
    NUM_HEADS: gl.constexpr,
    LORA: gl.constexpr,
    stride_buf_b: gl.constexpr,
    stride_buf_h: gl.constexpr,
    stride_buf_s: gl.constexpr,
):
    """Where each of ``heads``' rows starts (element offsets): in the buffer, the
    split's slot (its partial; the lse at ``+ LORA``), or with one split (``out_ptr``
    given) in the output."""
    if out_ptr is None:
        return (
            row.to(gl.int64) * stride_buf_b
            + heads.to(gl.int64) * stride_buf_h
            + split * stride_buf_s
        )
    return (row * NUM_HEADS + heads).to(gl.int64) * LORA


@gluon.jit
def _store_partial_lse(
    buf_ptr,
    l_i,
    m_i,
    tile,
    row,
    split,
    valid,
    NUM_HEADS: gl.constexpr,
    LORA: gl.constexpr,
    BLOCK_H: gl.constexpr,
    stride_buf_b: gl.constexpr,
    stride_buf_h: gl.constexpr,
    stride_buf_s: gl.constexpr,
):
    """The split's natural-log lse into its buffer slot (column ``LORA``), nothing for
    heads past ``NUM_HEADS`` or where ``valid`` is false (an empty split)."""
    lse_heads = tile * BLOCK_H + gl.arange(0, BLOCK_H, layout=l_i.type.layout)
    lse_off = (
        _head_rows(
            None,
            row,
            lse_heads,
            split,
            NUM_HEADS,
            LORA,
            stride_buf_b,
            stride_buf_h,
            stride_buf_s,
        )
        + LORA
    )
    lse = (m_i + gl.log2(l_i)) * _LN2
    gl.store(buf_ptr + lse_off, lse, mask=(lse_heads < NUM_HEADS) & valid)


@gluon.jit
def _write_partials(
    buf_ptr,
    out_ptr,
    lse_ptr,
    acc,
    l_i,
    m_i,
    kv_scale,
    tile,
    row,
    split,
    valid,
    stage,
    COL0: gl.constexpr,
    WRITE_LSE: gl.constexpr,
    BF16_PARTIALS: gl.constexpr,
    NUM_HEADS: gl.constexpr,
    LORA: gl.constexpr,
    BLOCK_H: gl.constexpr,
    stride_buf_b: gl.constexpr,
    stride_buf_h: gl.constexpr,
    stride_buf_s: gl.constexpr,
):
    """The split's normalised partial ``acc / l * kv_scale`` in the columns from
    ``COL0`` on (those ``acc`` holds), and its natural-log lse if
    ``WRITE_LSE``, into the buffer; nothing for heads past ``NUM_HEADS`` or where
    ``valid`` is false (an empty split); ``BF16_PARTIALS``: the partial in bf16, two
    to a float32 slot from the slot's start (``bf16_partials``). With one split
    (``out_ptr`` given) those columns of the output and the lse instead, as stage 2
    would write them (``_one_split_result``), an empty row's too. The columns go
    through ``stage`` (``_store_tile``)."""
    o_layout: gl.constexpr = acc.type.layout
    o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
    out_heads = tile * BLOCK_H + gl.arange(0, BLOCK_H, layout=o_rows)
    if out_ptr is None:
        out_off = _head_rows(
            out_ptr,
            row,
            out_heads,
            split,
            NUM_HEADS,
            LORA,
            stride_buf_b,
            stride_buf_h,
            stride_buf_s,
        )
        out_ok = (out_heads < NUM_HEADS) & valid
        part = acc * (kv_scale / gl.convert_layout(l_i, o_rows))[:, None]
        if BF16_PARTIALS:
            half_ptr = buf_ptr.to(gl.pointer_type(gl.bfloat16))
            _store_tile(half_ptr, 2 * out_off, out_ok, part.to(gl.bfloat16), stage, COL0)
        else:
            _store_tile(buf_ptr, out_off, out_ok, part, stage, COL0)
        if WRITE_LSE:
            _store_partial_lse(
                buf_ptr,
                l_i,
                m_i,
                tile,
                row,
                split,
                valid,
                NUM_HEADS,
                LORA,
                BLOCK_H,
                stride_buf_b,
                stride_buf_h,
                stride_buf_s,
            )
    else:
        norm, lse = _one_split_result(kv_scale / l_i, (m_i + gl.log2(l_i)) * _LN2, valid)
        out_off = _head_rows(
            out_ptr,
            row,
            out_heads,
            split,
            NUM_HEADS,
            LORA,
            stride_buf_b,
            stride_buf_h,
            stride_buf_s,
        )
        out = acc * gl.convert_layout(norm, o_rows)[:, None]
        out_ok = out_heads < NUM_HEADS
        _store_tile(out_ptr, out_off, out_ok, out.to(out_ptr.dtype.element_ty), None, COL0)
        if WRITE_LSE:
            lse_heads = tile * BLOCK_H + gl.arange(0, BLOCK_H, layout=l_i.type.layout)
            gl.store(lse_ptr + row * NUM_HEADS + lse_heads, lse, mask=lse_heads < NUM_HEADS)


@gluon.jit
def _store_tile(dst_ptr, row_off, row_ok, vals, stage, COL0: gl.constexpr):
    """``vals`` (``[rows, COLS]``, an MMA accumulator's layout) at ``dst_ptr +
    row_off[r] + COL0 + c`` where ``row_ok[r]`` (both in the layout's row slice).

    With ``stage`` None they are stored from the registers they are in: a thread holds
    two adjacent columns in every eight, so a warp's store reaches eight rows, eight
    cache lines an instruction. ``stage`` (shared memory the calling warpgroup alone
    uses now, at least ``vals``' bytes) turns them into rows first: a warp's store
    then covers one row's consecutive bytes, an element a thread (a split's float32
    partial rows, LORA + 1 apart, are only 4-byte aligned). The swizzle (8-element
    vectors XORed with the row) keeps both sides free of bank conflicts."""
    layout: gl.constexpr = vals.type.layout
    COLS: gl.constexpr = vals.shape[1]
    if stage is None:
        d = COL0 + gl.arange(0, COLS, layout=gl.SliceLayout(0, layout))
        gl.store(dst_ptr + row_off[:, None] + d[None, :], vals, mask=row_ok[:, None])
    else:
        swizzle: gl.constexpr = gl.SwizzledSharedLayout(8, 1, 8, [1, 0])
        # Two 16-bit values a thread (a 4-byte store, 128 bytes a warp), one 32-bit one.
        VEC: gl.constexpr = 2 if vals.dtype.primitive_bitwidth == 16 else 1
        rows_layout: gl.constexpr = gl.BlockedLayout([1, VEC], [1, 32], [gl.num_warps(), 1], [1, 0])
        staged = stage._reinterpret(vals.dtype, vals.shape, swizzle)
        staged.store(vals)
        gl.thread_barrier()
        r_rows: gl.constexpr = gl.SliceLayout(1, rows_layout)
        d = COL0 + gl.arange(0, COLS, layout=gl.SliceLayout(0, rows_layout))
        ptrs = dst_ptr + gl.convert_layout(row_off, r_rows)[:, None] + d[None, :]
        ok = gl.convert_layout(row_ok, r_rows)
        gl.store(ptrs, staged.load(rows_layout), mask=ok[:, None])


@gluon.jit
def _one_split_result(norm, lse, nonempty):
    """``kernels._one_split_result``: what stage 2 makes of a row's one partial, as
    ``(norm, lse)`` per head: those where the lse is finite, NaN for both where it is
    not, ``0, -inf`` where the row has no tokens."""
    finite = gl.abs(lse) < float("inf")
    norm = gl.where(nonempty, gl.where(finite, norm, float("nan")), 0.0)
    lse = gl.where(nonempty, gl.where(finite, lse, float("nan")), float("-inf"))
    return norm, lse


@gluon.jit
def _write_empty_row(
    out_ptr, lse_ptr, tile, row, NUM_HEADS: gl.constexpr, LORA: gl.constexpr, BLOCK_H: gl.constexpr
):
    """With one split, a row without tokens: its heads' output 0 and lse -inf, as stage
    2 writes them."""
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [gl.num_warps(), 1], [1, 0])
    heads = tile * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, layout))
    d = gl.arange(0, LORA, layout=gl.SliceLayout(0, layout))
    ok = heads < NUM_HEADS
    out_off = (row * NUM_HEADS + heads).to(gl.int64) * LORA
    zeros = gl.zeros([BLOCK_H, LORA], out_ptr.dtype.element_ty, layout)
    gl.store(out_ptr + out_off[:, None] + d[None, :], zeros, mask=ok[:, None])
    empty = gl.full([BLOCK_H], float("-inf"), gl.float32, gl.SliceLayout(1, layout))
    gl.store(lse_ptr + row * NUM_HEADS + heads, empty, mask=ok)


# A cluster-wide barrier (every thread of every CTA of the cluster arrives, then waits),
# release/acquire at cluster scope: the partials each CTA stored before it are
# visible to all of them after it.
_CLUSTER_SYNC_ASM = gl.constexpr(
    "barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\nmov.u32 $0, 0;"
)


@gluon.jit
def _live_splits(seq_lens_ptr, row, num_splits, CAPACITY: gl.constexpr):
    """How many of the row's splits hold tokens (``kernels.mla_decode_stage2``'s
    ``live``: splits ``[0, live)`` are exactly the non-empty ones; 0 for an empty row)."""
    seq_len = gl.minimum(gl.maximum(gl.load(seq_lens_ptr + row), 0), CAPACITY)
    per_split = gl.maximum((seq_len + num_splits - 1) // num_splits, 1)
    return (seq_len + per_split - 1) // per_split


@gluon.jit
def _cluster_sync(i):
    """``_CLUSTER_SYNC_ASM`` (``i``: any scalar, the asm's required operand)."""
    gl.inline_asm_elementwise(_CLUSTER_SYNC_ASM, "=r,r", [i], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _pair_merge(
    buf_ptr,
    out_ptr,
    lse_ptr,
    acc,
    l_i,
    m_i,
    kv_scale,
    tile,
    row,
    split,
    valid,
    stage,
    live,
    COL0: gl.constexpr,
    WRITE_LSE: gl.constexpr,
    NUM_HEADS: gl.constexpr,
    LORA: gl.constexpr,
    BLOCK_H: gl.constexpr,
    stride_buf_b: gl.constexpr,
    stride_buf_h: gl.constexpr,
    stride_buf_s: gl.constexpr,
):
    """Stage 2 for this warpgroup's columns of a row of two splits, in the CTA whose
    split is the warpgroup's half (split 0's warpgroup 0, split 1's warpgroup 1): its
    own normalised partial (``_write_partials``' values) staged in ``stage``, the
    other split's columns and both lses read from the buffer after the cluster
    barrier (from L2: the other CTA's warpgroup just stored them), merged with
    ``kernels.mla_decode_stage2``'s arithmetic into those columns of the output; split
    0's warpgroup 0 writes the lse. The partial's lse goes to the buffer first
    (warpgroup 0's, ``WRITE_LSE``), for the other CTA."""
    o_layout: gl.constexpr = acc.type.layout
    o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
    COLS: gl.constexpr = acc.shape[1]
    if WRITE_LSE:
        _store_partial_lse(
            buf_ptr,
            l_i,
            m_i,
            tile,
            row,
            split,
            valid,
            NUM_HEADS,
            LORA,
            BLOCK_H,
            stride_buf_b,
            stride_buf_h,
            stride_buf_s,
        )
    swizzle: gl.constexpr = gl.SwizzledSharedLayout(8, 1, 8, [1, 0])
    staged = stage._reinterpret(gl.float32, [BLOCK_H, COLS], swizzle)
    staged.store(acc * (kv_scale / gl.convert_layout(l_i, o_rows))[:, None])
    _cluster_sync(split)  # also publishes the staged rows to the warpgroup

    # A loop of 8-head chunks, not unrolled (the trip count starts at an opaque 0): the
    # merge runs once a CTA, and straight-line code that long waits on instruction
    # fetches. The chunks are 8-row views of the staged rows with the same swizzle
    # (its phase is the row mod 8).
    rows_layout: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [gl.num_warps(), 1], [1, 0])
    CHUNK: gl.constexpr = 8
    chunks = stage._reinterpret(gl.float32, [BLOCK_H // CHUNK, CHUNK, COLS], swizzle)
    d = COL0 + gl.arange(0, COLS, layout=gl.SliceLayout(0, rows_layout))
    other = 1 - split
    for c in range(_opaque_zero(split), BLOCK_H // CHUNK):
        heads = (
            tile * BLOCK_H + c * CHUNK + gl.arange(0, CHUNK, layout=gl.SliceLayout(1, rows_layout))
        )
        head_ok = heads < NUM_HEADS
        base = _head_rows(
            None, row, heads, 0, NUM_HEADS, LORA, stride_buf_b, stride_buf_h, stride_buf_s
        )  # split 0's slot
        lse0 = gl.load(
            buf_ptr + base + LORA,
            mask=head_ok & (live > 0),
            other=float("-inf"),
            cache_modifier=".cg",
        )
        lse1 = gl.load(
            buf_ptr + base + stride_buf_s + LORA,
            mask=head_ok & (live > 1),
            other=float("-inf"),
            cache_modifier=".cg",
        )
        theirs = gl.load(
            buf_ptr + (base + other * stride_buf_s)[:, None] + d[None, :],
            mask=(head_ok & (other < live))[:, None],
            other=0.0,
            cache_modifier=".cg",
        )
        # A dead split's slot, or its staged partial (0 / 0), may hold NaN: selected away.
        mine = gl.where((head_ok & (split < live))[:, None], chunks.index(c).load(rows_layout), 0.0)
        p0 = gl.where(split == 0, mine, theirs)
        p1 = gl.where(split == 0, theirs, mine)
        m = gl.maximum(lse0, lse1)
        w0 = gl.exp(lse0 - m)
        w1 = gl.exp(lse1 - m)
        total = w0 + w1
        merged = w0[:, None] * p0 + w1[:, None] * p1
        out = gl.where(live > 0, merged / gl.maximum(total, 1e-30)[:, None], 0.0)
        out_off = (row * NUM_HEADS + heads).to(gl.int64) * LORA
        gl.store(
            out_ptr + out_off[:, None] + d[None, :],
            out.to(out_ptr.dtype.element_ty),
            mask=head_ok[:, None],
        )
        if WRITE_LSE:
            lse_out = gl.where(live > 0, m + gl.log(total), float("-inf"))
            gl.store(lse_ptr + row * NUM_HEADS + heads, lse_out, mask=head_ok)


@gluon.jit
def _finish_split(
    buf_ptr,
    out_ptr,
    lse_ptr,
    acc,
    l_i,
    m_i,
    kv_scale,
    tile,
    row,
    split,
    valid,
    stage,
    live,
    COL0: gl.constexpr,
    WRITE_LSE: gl.constexpr,
    CLUSTER: gl.constexpr,
    BF16_PARTIALS: gl.constexpr,
    NUM_HEADS: gl.constexpr,
    LORA: gl.constexpr,
    BLOCK_H: gl.constexpr,
    stride_buf_b: gl.constexpr,
    stride_buf_h: gl.constexpr,
    stride_buf_s: gl.constexpr,
):
    """A seesaw warpgroup's end of its split: its columns of the partial (or with one
    split of the output), ``_write_partials``; in a cluster (``CLUSTER`` 2: a row's two
    splits) either its columns of the row's output (``_pair_merge``) or its partial
    for the other CTA to merge."""
    # Outside a cluster a constexpr False, so the merge is not even built.
    merges: gl.constexpr = False
    out_dst = out_ptr
    lse_dst = lse_ptr
    if CLUSTER > 1:
        # Split s's warpgroup s merges the row's columns it holds; the other one
        # stores its columns for the other CTA. One cluster barrier each.
        merges = split == (0 if COL0 == 0 else 1)
        out_dst = None  # its partial, for the other CTA
        lse_dst = None
    if merges:
        _pair_merge(
            buf_ptr,
            out_ptr,
            lse_ptr,
            acc,
            l_i,
            m_i,
            kv_scale,
            tile,
            row,
            split,
            valid,
            stage,
            live,
            COL0,
            WRITE_LSE,
            NUM_HEADS,
            LORA,
            BLOCK_H,
            stride_buf_b,
            stride_buf_h,
            stride_buf_s,
        )
    else:
        _write_partials(
            buf_ptr,
            out_dst,
            lse_dst,
            acc,
            l_i,
            m_i,
            kv_scale,
            tile,
            row,
            split,
            valid,
            stage,
            COL0,
            WRITE_LSE,
            BF16_PARTIALS,
            NUM_HEADS,
            LORA,
            BLOCK_H,
            stride_buf_b,
            stride_buf_h,
            stride_buf_s,
        )
        if CLUSTER > 1:
            _cluster_sync(split)


# --------------------------------------------------------------------------------------
# The fp8 kernel for 16-head tiles: tokens on the MMA's M (see the module docstring).


# S^T's K is read from the ring in 64-column chunks of int32 words (4 values each): a
# thread holds 16 consecutive bytes of rows r and r + 8, a warp's lanes
# 4 pieces x 8 rows, the warps 16 rows apart, which is where wgmma's register A operand
# puts them (``_qk_operand``).
_CHUNK = gl.constexpr(64)
_CHUNK_WORDS_LAYOUT = gl.constexpr(
    gl.DistributedLinearLayout(
        reg_bases=[[0, 1], [0, 2], [8, 0]],
        lane_bases=[[0, 4], [0, 8], [1, 0], [2, 0], [4, 0]],
        warp_bases=[[16, 0], [32, 0]],
        block_bases=[],
        shape=[64, 16],
    )
)


# e4m3 -> fp16 by the e4m3 cvt, 4 values (one 32-bit word) at a time: two
# cvt.rn.f16x2.e4m3x2 (exact: every e4m3 value is an fp16 value).
_E4M3_TO_F16_CVT_ASM = gl.constexpr("""{
.reg .b16 lo, hi;
mov.b32 {lo, hi}, $2;
cvt.rn.f16x2.e4m3x2 $0, lo;
cvt.rn.f16x2.e4m3x2 $1, hi;
}""")


# One 32-bit register's two 16-bit halves as two fp16 elements.
_HALVES_ASM = gl.constexpr("mov.b32 {$0, $1}, $2;")


@gluon.jit
def _f16_halves(pairs):
    """``pairs`` (int32, each two fp16 values) as two fp16 tensors: low, high halves."""
    return gl.inline_asm_elementwise(
        _HALVES_ASM, "=h,=h,r", [pairs], dtype=(gl.float16, gl.float16), is_pure=True, pack=1
    )


@gluon.jit
def _widen_f16(words):
    """``words`` (``[R, C]`` int32, each 4 e4m3 values of consecutive columns) as
    ``[R, 4C]`` fp16 values in column order: two cvt a word, then register moves."""
    lo, hi = gl.inline_asm_elementwise(
        _E4M3_TO_F16_CVT_ASM, "=r,=r,r", [words], dtype=(gl.int32, gl.int32), is_pure=True, pack=1
    )
    v0, v1 = _f16_halves(lo)
    v2, v3 = _f16_halves(hi)
    wide = gl.join(gl.join(v0, v2), gl.join(v1, v3))  # [R, C, j, i]: value 2j + i
    return gl.reshape(wide, [words.shape[0], 4 * words.shape[1]])


@gluon.jit
def _qk_operand(chunk, layout: gl.constexpr):
    """A widened chunk (``[64, 64]``, from ``_CHUNK_WORDS_LAYOUT``) as wgmma's register A
    operand (``layout``) with its columns permuted: column ``16c + 4t + 2h + e`` goes to
    ``16t + 8h + 2c + e`` (c, t < 4; h, e < 2). The operand layout gives lane c of a
    quad columns ``2c, 2c + 1, 2c + 8, 2c + 9`` of each 16-column k-step; the loads give
    it 16 consecutive columns; the permutation maps one onto the other inside each
    thread, so the conversion moves no data (asserted at compile time). The sum over
    columns does not care about their order as long as Q's are permuted alike
    (``_permuted_cols``)."""
    x = gl.reshape(chunk, [_CHUNK, 4, 4, 2, 2])  # r, c, t, h, e
    x = gl.permute(x, [0, 2, 3, 1, 4])  # r, t, h, c, e
    return gl.convert_layout(gl.reshape(x, [_CHUNK, _CHUNK]), layout, assert_trivial=True)


@gluon.jit
def _permuted_cols(COLS: gl.constexpr, layout: gl.constexpr):
    """For each column ``k`` of ``COLS`` columns in ``_qk_operand``'s order, the column
    it came from: inside each 64, ``16c + 4t + 2h + e`` for ``k = 16t + 8h + 2c + e``."""
    k = gl.arange(0, COLS, layout=layout)
    t = (k >> 4) & 3
    h = (k >> 3) & 1
    c = (k >> 1) & 3
    return (k & ~63) + 16 * c + 4 * t + 2 * h + (k & 1)


@gluon.jit
def _finite_amax(x):
    """The largest finite magnitude of each row of ``x`` (float32; NaN fails the
    comparison), 0 for a row with none."""
    return gl.max(gl.where(gl.abs(x) < float("inf"), gl.abs(x), 0.0), 1)


@gluon.jit
def _f16_head_scale(amax):
    """For a head whose largest finite magnitude is ``amax``: the power of two that
    takes it into ``[2^14, 2^15)`` and its inverse (the head's logit factor). amax <
    2^(e - 126) for its biased exponent e, so 2^(141 - e) does; the clamp keeps both
    powers normal float32s (a zero head: any scale)."""
    e = (amax.to(gl.int32, bitcast=True) >> 23) & 0xFF
    k = gl.minimum(gl.maximum(141 - e, -120), 120)
    return ((k + 127) << 23).to(gl.float32, bitcast=True), ((127 - k) << 23).to(
        gl.float32, bitcast=True
    )


@gluon.jit
def _copy_query_f16(
    q_nope_dst,
    q_pe_dst,
    q_nope_ptr,
    q_pe_ptr,
    tile,
    row,
    NUM_HEADS: gl.constexpr,
    BLOCK_H: gl.constexpr,
    LORA: gl.constexpr,
    ROPE: gl.constexpr,
    QP_OFFSET: gl.constexpr,
    stride_qn_b: gl.constexpr,
    stride_qn_h: gl.constexpr,
    stride_qp_b: gl.constexpr,
    stride_qp_h: gl.constexpr,
    layout: gl.constexpr,
):
    """The row's query tile (heads past ``NUM_HEADS`` zero) into shared memory as fp16,
    its columns in ``_qk_operand``'s order, through registers. Returns the factor each
    head's logits then need (``[BLOCK_H]`` in ``layout``'s rows): 1 for fp16 q. Each
    head of a bf16 tile is scaled by the power of two that puts its largest finite
    magnitude in ``[2^14, 2^15)``, and its factor is the inverse; every element within a
    factor 2^29 of that largest is then an fp16 normal, hence exact (bf16's 8
    significant bits fit in fp16's 11), smaller ones round to fp16's spacing there,
    2^-39 of the largest. A head's scale depends on its own values alone, so NaN or inf
    in one head leaves the others as they are."""
    heads = tile * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, layout))
    head_ok = heads < NUM_HEADS
    cols = _permuted_cols(LORA, gl.SliceLayout(0, layout))
    q_nope = gl.load(
        q_nope_ptr + row * stride_qn_b + heads[:, None] * stride_qn_h + cols[None, :],
        mask=head_ok[:, None],
        other=0.0,
    ).to(gl.float32)
    cols = _permuted_cols(ROPE, gl.SliceLayout(0, layout))
    q_pe = gl.load(
        q_pe_ptr + row * stride_qp_b + QP_OFFSET + heads[:, None] * stride_qp_h + cols[None, :],
        mask=head_ok[:, None],
        other=0.0,
    ).to(gl.float32)
    if q_nope_ptr.dtype.element_ty == gl.bfloat16:
        amax = gl.maximum(_finite_amax(q_nope), _finite_amax(q_pe))
        scale, logit_factor = _f16_head_scale(amax)
    else:
        scale = gl.full([BLOCK_H], 1.0, gl.float32, layout=gl.SliceLayout(1, layout))
        logit_factor = scale
    q_nope_dst.store((q_nope * scale[:, None]).to(gl.float16))
    q_pe_dst.store((q_pe * scale[:, None]).to(gl.float16))
    return logit_factor


def _thread_any_asm(n: int) -> str:
    """PTX setting the predicate %mla_any to "one of this thread's ``n`` values is
    nonzero", for an ``inline_asm_elementwise`` of ``pack=n`` (one invocation holds all
    of a thread's values; its outputs are unused). %mla_any is declared outside the
    braces, at the kernel's scope, so that ``_CTA_OR_ASM`` can read it: Gluon has no op
    that takes a scalar out of a tensor without a cross-warp reduction, the cost the
    vote avoids. So a kernel may contain one ``_cta_any`` (ptxas rejects a second
    declaration; CI builds every kernel)."""
    ors = "\n".join(f"or.b32 t, t, ${n + k};" for k in range(1, n))
    zeros = " ".join(f"mov.b32 ${k}, 0;" for k in range(n))
    return (
        f".reg .pred %mla_any;\n{{\n.reg .b32 t;\nmov.b32 t, ${n};\n{ors}\n"
        f"setp.ne.b32 %mla_any, t, 0;\n{zeros}\n}}"
    )


def _thread_any(n: int) -> tuple[str, str, int]:
    """``_cta_any``'s first half for ``n`` values a thread: the PTX, its constraints,
    ``n`` (the ``pack``)."""
    return _thread_any_asm(n), ",".join(["=r"] * n + ["r"] * n), n


_THREAD_ANY_8 = gl.constexpr(_thread_any(8))
_THREAD_ANY_16 = gl.constexpr(_thread_any(16))
# A CTA barrier that also ORs %mla_any over the CTA (bar.red): a scalar, 1 or 0.
_CTA_OR_ASM = gl.constexpr("""{
.reg .pred p;
bar.red.or.pred p, 0, %mla_any;
selp.b32 $0, 1, 0, p;
}""")


@gluon.jit
def _cta_any(flags, i, ANY: gl.constexpr):
    """1 if any element of ``flags`` (int32, ``ANY[2]`` a thread; ``ANY``: a
    ``_thread_any`` triple) is nonzero anywhere in the CTA, else 0: a scalar, the same
    in every thread (``i``: any scalar, the asm's required operand). It is a CTA
    barrier (``bar.red.or``): the softmax's vote on whether a running max must move
    (see its callers)."""
    gl.inline_asm_elementwise(ANY[0], ANY[1], [flags], dtype=gl.int32, is_pure=False, pack=ANY[2])
    return gl.inline_asm_elementwise(
        _CTA_OR_ASM, "=r,r", [i], dtype=gl.int32, is_pure=False, pack=1
    )


def _warp_any_asm(name: str) -> tuple[str, str]:
    """The PTX pair of ``_warp_any`` for 2 values a thread, the predicate named
    ``name`` (one name a call site: ptxas rejects a second declaration, see
    ``_thread_any_asm``): the first sets it to "one of the warp's values is nonzero"
    (``vote.sync.any``), the second reads it as a scalar."""
    set_asm = (
        f".reg .pred {name};\n{{\n.reg .b32 t;\n.reg .pred q;\nor.b32 t, $2, $3;\n"
        f"setp.ne.b32 q, t, 0;\nvote.sync.any.pred {name}, q, 0xffffffff;\n"
        "mov.b32 $0, 0; mov.b32 $1, 0;\n}"
    )
    return set_asm, f"selp.b32 $0, 1, 0, {name};"


_WG0_SCALE0_ANY = gl.constexpr(_warp_any_asm("%mla_wg0_scale0"))
_WG0_SCALE1_ANY = gl.constexpr(_warp_any_asm("%mla_wg0_scale1"))
_WG1_SCALE0_ANY = gl.constexpr(_warp_any_asm("%mla_wg1_scale0"))
_WG1_SCALE1_ANY = gl.constexpr(_warp_any_asm("%mla_wg1_scale1"))


@gluon.jit
def _warp_any(flags, i, ASM: gl.constexpr):
    """1 if any element of ``flags`` (int32, 2 a thread) is nonzero in this thread's
    warp, else 0: a scalar, the same in every thread of the warp (``i``: any scalar,
    the asm's required operand; ``ASM``: a ``_warp_any_asm`` pair of its own)."""
    gl.inline_asm_elementwise(ASM[0], "=r,=r,r,r", [flags], dtype=gl.int32, is_pure=False, pack=2)
    return gl.inline_asm_elementwise(ASM[1], "=r,r", [i], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _rescale_rows(acc, scale, i, rows_layout: gl.constexpr, ASM: gl.constexpr):
    """``acc * scale`` by rows, skipped in a warp whose rows all have ``scale == 1``
    (most blocks, with lazy rescaling: the multiply would change nothing, not even a
    NaN or an inf, so the result is the same bit for bit; NaN scales differ from 1)."""
    if _warp_any((scale != 1.0).to(gl.int32), i, ASM) != 0:
        acc = acc * gl.convert_layout(scale, rows_layout)[:, None]
    return acc


@gluon.jit
def _column_softmax(s, qk_scale, live, m_i, l_acc, accs, pt, i):
    """One block's softmax over S^T (tokens on rows, heads on columns) in the 16-head
    kernels: the logits ``s * qk_scale`` (rows outside the split, ``live`` false, at
    -inf), P^T on the running max ``m_i`` stored into ``pt`` (its dtype) and fenced for
    the MMAs; then a CTA vote (``_cta_any``, whose barrier publishes P^T; ``i`` any
    scalar) on whether a column grew past ``m_i`` by more than ``RESCALE_THRESHOLD``,
    and only then the exact column max, P^T again, and the row sums ``l_acc`` and each
    accumulator of ``accs`` (O^T tiles, heads on columns) rescaled. Returns ``(m_i,
    l_acc, accs)``; ``l_acc`` (``[tokens, heads]``) holds per-thread partial sums of P."""
    s = gl.where(live[:, None], s * qk_scale, float("-inf"))
    p = gl.exp2(s - m_i[None, :])
    pt.store(p.to(pt.dtype))
    fence_async_shared()
    flags = (s - m_i[None, :] > RESCALE_THRESHOLD).to(gl.int32)
    if s.shape[1] == 16:  # the flags a thread holds: 64 tokens x the tile's heads / 128
        grew = _cta_any(flags, i, _THREAD_ANY_8)
    else:
        grew = _cta_any(flags, i, _THREAD_ANY_16)
    if grew != 0:
        m_new = gl.maximum(m_i, gl.max(s, 0))
        grow = m_new - m_i > RESCALE_THRESHOLD
        alpha = gl.where(grow, gl.exp2(m_i - m_new), 1.0)
        m_i = gl.where(grow, m_new, m_i)
        p = gl.exp2(s - m_i[None, :])
        l_acc = l_acc * alpha[None, :] + p
        rescaled = ()
        for k in gl.static_range(len(accs)):
            rescaled = rescaled + (accs[k] * alpha[None, :],)
        accs = rescaled
        pt.store(p.to(pt.dtype))
        fence_async_shared()
        gl.thread_barrier()
    else:
        l_acc = l_acc + p
    return m_i, l_acc, accs


# A latent pair (128 fp8 columns, 32 words a row) in the ring: 16-byte units swizzled
# by row, unit ^ (2 * ((row >> 1) & 3) ^ 4 * (row & 1)). Both reads are then free of
# bank conflicts: S^T's (a quarter warp reads rows r, r + 1 of one 64-column chunk:
# the row bit moves them to the other half of the units) and V^T's (a warp reads one
# word of rows 2c + e, c < 4, at 8 consecutive words: row bits 1-2 spread the four
# rows over the units).
_RING_PAIR_LAYOUT = gl.constexpr(
    gl.SharedLinearLayout(
        offset_bases=[
            [0, 1],
            [0, 2],
            [0, 4],
            [0, 8],
            [0, 16],
            [1, 16],
            [2, 8],
            [4, 16],
            [8, 0],
            [16, 0],
            [32, 0],
        ]
    )
)
# V^T's words of a latent pair, [64 tokens, 32 words]: a thread holds word 8w + q
# (w its warp, q = lane / 4) of tokens 2c + {0, 1, 8, 9} + 16k (c = lane % 4, k < 4),
# the tokens and rows of wgmma's register A operand, so that the widening below puts
# every value where the operand layout wants it.
_PV_WORDS_LAYOUT = gl.constexpr(
    gl.DistributedLinearLayout(
        reg_bases=[[1, 0], [8, 0], [16, 0], [32, 0]],
        lane_bases=[[2, 0], [4, 0], [0, 1], [0, 2], [0, 4]],
        warp_bases=[[0, 8], [0, 16]],
        block_bases=[],
        shape=[64, 32],
    )
)


def _pv_cvt_asm(half: int) -> str:
    """PTX widening byte ``2 * half`` and ``2 * half + 1`` of an even token's word ($2)
    and the odd token's ($3): two fp16 pairs (even token low, odd token high), one a
    byte (a latent dim)."""
    j = 2 * half
    sel = j | (4 + j) << 4 | (j + 1) << 8 | (5 + j) << 12
    return (
        "{\n.reg .b32 t;\n.reg .b16 lo, hi;\n"
        f"prmt.b32 t, $2, $3, {sel:#x};\n"
        "mov.b32 {lo, hi}, t;\n"
        "cvt.rn.f16x2.e4m3x2 $0, lo;\ncvt.rn.f16x2.e4m3x2 $1, hi;\n}"
    )


_PV_CVT_ASM = gl.constexpr((_pv_cvt_asm(0), _pv_cvt_asm(1)))


@gluon.jit
def _ring_copy(
    lat0,
    lat1,
    lat2,
    lat3,
    pe,
    kv_ptr,
    page,
    n0,
    start,
    end,
    PAGE_SIZE: gl.constexpr,
    NUM_PAGES: gl.constexpr,
    stride_kv_page: gl.constexpr,
    stride_kv_row: gl.constexpr,
):
    """``cp.async`` of the block at token ``n0`` (raw page index ``page``) into one ring
    stage as int32 words, rows outside ``[start, end)`` zero-filled; commits no group."""
    lat_layout: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])
    pe_layout: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0])
    words = kv_ptr.to(gl.pointer_type(gl.int32), bitcast=True)
    page_base = words + _safe_page(page, NUM_PAGES).to(gl.int64) * (stride_kv_page // 4)
    # Rows of the page, as the seesaw's copies (offsets that change block to block are
    # not hoisted out of the loop).
    offs = gl.arange(0, _CHUNK, layout=gl.SliceLayout(1, lat_layout))
    rows = n0 % PAGE_SIZE + offs
    ok = (n0 + offs >= start) & (n0 + offs < end)
    _copy_rows(lat0, page_base, rows, ok, stride_kv_row // 4, 32, lat_layout)
    _copy_rows(lat1, page_base + 32, rows, ok, stride_kv_row // 4, 32, lat_layout)
    _copy_rows(lat2, page_base + 64, rows, ok, stride_kv_row // 4, 32, lat_layout)
    _copy_rows(lat3, page_base + 96, rows, ok, stride_kv_row // 4, 32, lat_layout)
    offs = gl.arange(0, _CHUNK, layout=gl.SliceLayout(1, pe_layout))
    rows = n0 % PAGE_SIZE + offs
    ok = (n0 + offs >= start) & (n0 + offs < end)
    _copy_rows(pe, page_base + 128, rows, ok, stride_kv_row // 4, 16, pe_layout)


@gluon.jit
def _qk_chunk(words, s, q_chunk, FIRST: gl.constexpr, a_layout: gl.constexpr):
    """``S^T += K_c Q_c^T`` for one 64-column chunk's ``words`` (read from the ring),
    widened into the register A operand; waits for the chunk before (its registers
    are then free)."""
    a = _qk_operand(_widen_f16(words), a_layout)
    s = warpgroup_mma(a, q_chunk.permute((1, 0)), s, use_acc=not FIRST, is_async=True)
    return warpgroup_mma_wait(num_outstanding=1, deps=(s,))


@gluon.jit
def _pv_operand(even, odd, HALF: gl.constexpr, a_layout: gl.constexpr):
    """M-tile ``HALF`` of a latent pair's V^T (``_pv_operands``) from its even and odd
    tokens' words: bytes ``2 HALF`` and ``2 HALF + 1`` of each word, widened."""
    h0, h1 = gl.inline_asm_elementwise(
        _PV_CVT_ASM[HALF],
        "=r,=r,r,r",
        [even, odd],
        dtype=(gl.int32, gl.int32),
        is_pure=True,
        pack=1,
    )
    e0, o0 = _f16_halves(h0)
    e1, o1 = _f16_halves(h1)
    # (join adds a last axis: the inner pairs are h, the outer e.)
    t = gl.join(gl.join(e0, e1), gl.join(o0, o1))  # [token pair, word, h, e]
    t = gl.permute(gl.reshape(t, [32, 4, 8, 2, 2]), [1, 3, 2, 0, 4])  # w, h, q, tp, e
    return gl.convert_layout(gl.reshape(t, [64, 64]), a_layout, assert_trivial=True)


@gluon.jit
def _pv_operands(x, a_layout: gl.constexpr):
    """V^T of one latent pair from its words ``x`` (``[64 tokens, 32 words]`` of its ring
    stage in ``_PV_WORDS_LAYOUT``) as the register A operands of its two M-tiles: M-tile
    ``b`` row ``r`` is latent dim ``32 (r >> 4) + 4 (r & 7) + 2 b + ((r >> 3) & 1)`` of
    the pair (``_pair_out``), the tokens in order."""
    even, odd = gl.split(gl.permute(gl.reshape(x, [32, 2, 32]), [0, 2, 1]))
    return _pv_operand(even, odd, 0, a_layout), _pv_operand(even, odd, 1, a_layout)


# A latent pair's O^T ([128 dims, 16 heads]) in the dims' order: a thread's four values
# of a head are four consecutive dims (its rows q and q + 8 of the pair's two M-tiles).
_PAIR_OUT_LAYOUT = gl.constexpr(
    gl.DistributedLinearLayout(
        reg_bases=[[1, 0], [2, 0], [0, 1], [0, 8]],
        lane_bases=[[0, 2], [0, 4], [4, 0], [8, 0], [16, 0]],
        warp_bases=[[32, 0], [64, 0]],
        block_bases=[],
        shape=[128, 16],
    )
)
# A pair's staged partials read back by rows (a head's 128 dims), 32 consecutive dims a
# warp store: the rows in the buffer are 513 float32 apart, so 4-byte stores.
_PAIR_ROWS_LAYOUT = gl.constexpr(gl.BlockedLayout([1, 1], [1, 32], [4, 1], [1, 0]))
# The staged pair, [16 heads, 128 dims] float32, a row 132 words apart (16-byte
# aligned): a quarter warp's 16-byte stores of the tile (4 heads two apart, 2 dim groups)
# then fall on distinct banks, and the reads by rows too.
_PAIR_STAGE_LAYOUT = gl.constexpr(
    gl.PaddedSharedLayout.with_identity_for([[128, 4]], [SMALL_BLOCK_H, 128], [1, 0])
)


@gluon.jit
def _pair_out(o_b0, o_b1, norm):
    """The pair's two normalised M-tiles as one ``[128, 16]`` tile in the dims' order
    (``_PAIR_OUT_LAYOUT``: a relabelling of the accumulators' registers)."""
    x = gl.join(o_b0 * norm[None, :], o_b1 * norm[None, :])  # [r, head, b]
    x = gl.permute(gl.reshape(x, [4, 2, 8, 16, 2]), [0, 2, 4, 1, 3])  # w, q, b, h, head
    return gl.convert_layout(gl.reshape(x, [128, 16]), _PAIR_OUT_LAYOUT, assert_trivial=True)


@gluon.jit
def _stage_pair(pair, o_b0, o_b1, norm):
    """Stage a pair's normalised O^T tiles into its (dead) ring allocation ``pair`` as
    ``[16 heads, 128 dims]``; returns that view."""
    st = pair._reinterpret(gl.float32, [16, 128], _PAIR_STAGE_LAYOUT)
    st.permute((1, 0)).store(_pair_out(o_b0, o_b1, norm))
    return st


@gluon.jit
def _store_pair(dst_ptr, off, ok, st, P: gl.constexpr):
    """A staged pair (``_stage_pair``) into latent dims ``[128 P, 128 P + 128)`` of each
    head's row at ``off`` (heads not ``ok`` skipped), by rows."""
    dims = 128 * P + gl.arange(0, 128, layout=gl.SliceLayout(0, _PAIR_ROWS_LAYOUT))
    out = st.load(_PAIR_ROWS_LAYOUT).to(dst_ptr.dtype.element_ty)
    gl.store(dst_ptr + off[:, None] + dims[None, :], out, mask=ok[:, None])


@gluon.jit
def mla_decode_stage1_gluon_fp8_h16(
    q_nope_ptr,
    q_pe_ptr,
    kv_ptr,
    block_table_ptr,
    seq_lens_ptr,
    num_splits_ptr,
    kv_scale_ptr,
    buf_in_ptr,  # noqa: ARG001 (the aliased buffer as an input, never read)
    buf_ptr,
    out_ptr,
    lse_ptr,
    SM_SCALE: gl.constexpr,
    NUM_HEADS: gl.constexpr,
    PAGE_SIZE: gl.constexpr,
    NUM_PAGES: gl.constexpr,
    CAPACITY: gl.constexpr,
    LORA: gl.constexpr,
    ROPE: gl.constexpr,
    stride_qn_b: gl.constexpr,
    stride_qn_h: gl.constexpr,
    stride_qp_b: gl.constexpr,
    stride_qp_h: gl.constexpr,
    QP_OFFSET: gl.constexpr,
    stride_kv_page: gl.constexpr,
    stride_kv_row: gl.constexpr,
    stride_bt_b: gl.constexpr,
    stride_buf_b: gl.constexpr,
    stride_buf_h: gl.constexpr,
    stride_buf_s: gl.constexpr,
    BLOCK_H: gl.constexpr,
    BLOCK_N: gl.constexpr,
):
    """Stage 1 for an fp8 cache, 16-head tiles, tokens on the MMAs' M (the module
    docstring): the blocks through a two-stage ``cp.async`` ring of fp8 words (block
    j + 1 in flight while block j is multiplied), K and V^T widened from the ring into
    the MMAs' register operands. 94,464 bytes of shared memory: two CTAs an SM."""
    gl.static_assert(PAGE_SIZE % BLOCK_N == 0, "blocks must lie inside one page")
    gl.static_assert(gl.num_warps() == 4, "one warpgroup")
    gl.static_assert(BLOCK_N == _CHUNK, "a block is one warpgroup MMA's M")
    gl.static_assert(LORA == 8 * _CHUNK and ROPE == _CHUNK, "DeepSeek's 512 + 64 columns")
    gl.static_assert(kv_ptr.dtype.element_ty == gl.float8e4nv, "a float8_e4m3fn cache")
    dtype: gl.constexpr = gl.float16

    tile = gl.program_id(0)
    row = gl.program_id(1)
    split = gl.program_id(2)
    _, start, end = _split_bounds(
        seq_lens_ptr, num_splits_ptr, row, split, out_ptr is not None, CAPACITY
    )
    if end <= start:
        if out_ptr is not None:
            _write_empty_row(out_ptr, lse_ptr, tile, row, NUM_HEADS, LORA, BLOCK_H)
        return

    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_H, 16]
    )
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_layout, k_width=2)
    cols_layout: gl.constexpr = gl.SliceLayout(0, mma_layout)
    rows_layout: gl.constexpr = gl.SliceLayout(1, mma_layout)
    q_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    q_nope_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, LORA], dtype)
    q_pe_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, ROPE], dtype)
    p_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_H], dtype)
    pe_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    q_nope_smem = gl.allocate_shared_memory(dtype, [1, BLOCK_H, LORA], q_nope_layout)
    q_pe_smem = gl.allocate_shared_memory(dtype, [1, BLOCK_H, ROPE], q_pe_layout)
    pt_smem = gl.allocate_shared_memory(dtype, [1, BLOCK_N, BLOCK_H], p_layout)
    # The ring: two stages of the block's fp8 words, the latent as four pairs of
    # 64-column chunks, the rope columns apart.
    lat0 = gl.allocate_shared_memory(gl.int32, [2, BLOCK_N, 32], _RING_PAIR_LAYOUT)
    lat1 = gl.allocate_shared_memory(gl.int32, [2, BLOCK_N, 32], _RING_PAIR_LAYOUT)
    lat2 = gl.allocate_shared_memory(gl.int32, [2, BLOCK_N, 32], _RING_PAIR_LAYOUT)
    lat3 = gl.allocate_shared_memory(gl.int32, [2, BLOCK_N, 32], _RING_PAIR_LAYOUT)
    pe = gl.allocate_shared_memory(gl.int32, [2, BLOCK_N, 16], pe_layout)

    bt_row = block_table_ptr + row * stride_bt_b
    first = start - start % BLOCK_N
    page = gl.load(bt_row + first // PAGE_SIZE)
    _ring_copy(
        lat0.index(0),
        lat1.index(0),
        lat2.index(0),
        lat3.index(0),
        pe.index(0),
        kv_ptr,
        page,
        first,
        start,
        end,
        PAGE_SIZE,
        NUM_PAGES,
        stride_kv_page,
        stride_kv_row,
    )
    async_copy.commit_group()
    page = gl.load(bt_row + (first + BLOCK_N) // PAGE_SIZE, mask=first + BLOCK_N < end, other=0)
    logit_factor = _copy_query_f16(
        q_nope_smem.index(0),
        q_pe_smem.index(0),
        q_nope_ptr,
        q_pe_ptr,
        tile,
        row,
        NUM_HEADS,
        BLOCK_H,
        LORA,
        ROPE,
        QP_OFFSET,
        stride_qn_b,
        stride_qn_h,
        stride_qp_b,
        stride_qp_h,
        q_layout,
    )
    fence_async_shared()  # Q is read by the MMAs (the async proxy)

    kv_scale = gl.load(kv_scale_ptr)
    qk_scale = gl.convert_layout(logit_factor, cols_layout) * (SM_SCALE * _LOG2E * kv_scale)
    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=cols_layout)
    l_acc = gl.zeros([BLOCK_N, BLOCK_H], gl.float32, layout=mma_layout)
    o0 = gl.zeros([_CHUNK, BLOCK_H], gl.float32, layout=mma_layout)
    o1 = gl.zeros([_CHUNK, BLOCK_H], gl.float32, layout=mma_layout)
    o2 = gl.zeros([_CHUNK, BLOCK_H], gl.float32, layout=mma_layout)
    o3 = gl.zeros([_CHUNK, BLOCK_H], gl.float32, layout=mma_layout)
    o4 = gl.zeros([_CHUNK, BLOCK_H], gl.float32, layout=mma_layout)
    o5 = gl.zeros([_CHUNK, BLOCK_H], gl.float32, layout=mma_layout)
    o6 = gl.zeros([_CHUNK, BLOCK_H], gl.float32, layout=mma_layout)
    o7 = gl.zeros([_CHUNK, BLOCK_H], gl.float32, layout=mma_layout)
    s = gl.zeros([BLOCK_N, BLOCK_H], gl.float32, layout=mma_layout)
    s_rows = gl.arange(0, BLOCK_N, layout=rows_layout)

    for n0 in range(first, end, BLOCK_N):
        stage = ((n0 - first) // BLOCK_N) & 1
        z = _opaque_zero(n0)
        q_nope = q_nope_smem.index(z)
        q_pe = q_pe_smem.index(z)
        pt = pt_smem.index(z)
        # This block has landed (this thread's copies, then, past the barrier, every
        # thread's); every warp is past the last block's reads of the other stage and
        # its PV MMAs, so the next block may be copied there and P^T overwritten.
        async_copy.wait_group(0)
        gl.thread_barrier()
        # The page index two blocks ahead first: the copies issued after it would
        # otherwise stand before it in the load queue.
        nxt = n0 + BLOCK_N
        page_after = gl.load(
            bt_row + (nxt + BLOCK_N) // PAGE_SIZE, mask=nxt + BLOCK_N < end, other=0
        )
        _ring_copy(
            lat0.index(1 - stage),
            lat1.index(1 - stage),
            lat2.index(1 - stage),
            lat3.index(1 - stage),
            pe.index(1 - stage),
            kv_ptr,
            page,
            nxt,
            start,
            end,
            PAGE_SIZE,
            NUM_PAGES,
            stride_kv_page,
            stride_kv_row,
        )
        async_copy.commit_group()
        page = page_after
        k0 = lat0.index(stage)
        k1 = lat1.index(stage)
        k2 = lat2.index(stage)
        k3 = lat3.index(stage)
        kp = pe.index(stage)
        # Each chunk's words are read one chunk ahead of its widening, so that the
        # shared load's latency passes under the MMA before.
        w = k0.slice(0, 16, 1).load(_CHUNK_WORDS_LAYOUT)
        w_next = k0.slice(16, 16, 1).load(_CHUNK_WORDS_LAYOUT)
        s = _qk_chunk(w, s, q_nope.slice(0, 64, 1), True, a_layout)
        w = k1.slice(0, 16, 1).load(_CHUNK_WORDS_LAYOUT)
        s = _qk_chunk(w_next, s, q_nope.slice(64, 64, 1), False, a_layout)
        w_next = k1.slice(16, 16, 1).load(_CHUNK_WORDS_LAYOUT)
        s = _qk_chunk(w, s, q_nope.slice(128, 64, 1), False, a_layout)
        w = k2.slice(0, 16, 1).load(_CHUNK_WORDS_LAYOUT)
        s = _qk_chunk(w_next, s, q_nope.slice(192, 64, 1), False, a_layout)
        w_next = k2.slice(16, 16, 1).load(_CHUNK_WORDS_LAYOUT)
        s = _qk_chunk(w, s, q_nope.slice(256, 64, 1), False, a_layout)
        w = k3.slice(0, 16, 1).load(_CHUNK_WORDS_LAYOUT)
        s = _qk_chunk(w_next, s, q_nope.slice(320, 64, 1), False, a_layout)
        w_next = k3.slice(16, 16, 1).load(_CHUNK_WORDS_LAYOUT)
        s = _qk_chunk(w, s, q_nope.slice(384, 64, 1), False, a_layout)
        w = kp.load(_CHUNK_WORDS_LAYOUT)
        s = _qk_chunk(w_next, s, q_nope.slice(448, 64, 1), False, a_layout)
        s = _qk_chunk(w, s, q_pe, False, a_layout)
        # The first two pairs' V^T words too, under the softmax.
        x0 = k0.load(_PV_WORDS_LAYOUT)
        x1 = k1.load(_PV_WORDS_LAYOUT)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
        tokens = n0 + s_rows
        live = (tokens >= start) & (tokens < end)
        o_tiles = (o0, o1, o2, o3, o4, o5, o6, o7)
        scale = qk_scale[None, :]
        m_i, l_acc, o_tiles = _column_softmax(s, scale, live, m_i, l_acc, o_tiles, pt, n0)
        o0, o1, o2, o3, o4, o5, o6, o7 = o_tiles
        # O^T += V^T P^T, a latent pair (two M-tiles) at a time, V^T widened from the
        # ring into registers; a pair's operands are freed once the next pair's MMAs
        # are issued and its own are done.
        a0, a1 = _pv_operands(x0, a_layout)
        o0 = warpgroup_mma(a0, pt, o0, is_async=True)
        o1 = warpgroup_mma(a1, pt, o1, is_async=True)
        x2 = k2.load(_PV_WORDS_LAYOUT)
        a2, a3 = _pv_operands(x1, a_layout)
        o2 = warpgroup_mma(a2, pt, o2, is_async=True)
        o3 = warpgroup_mma(a3, pt, o3, is_async=True)
        x3 = k3.load(_PV_WORDS_LAYOUT)
        o0, o1 = warpgroup_mma_wait(num_outstanding=2, deps=(o0, o1))
        a4, a5 = _pv_operands(x2, a_layout)
        o4 = warpgroup_mma(a4, pt, o4, is_async=True)
        o5 = warpgroup_mma(a5, pt, o5, is_async=True)
        o2, o3 = warpgroup_mma_wait(num_outstanding=2, deps=(o2, o3))
        a6, a7 = _pv_operands(x3, a_layout)
        o6 = warpgroup_mma(a6, pt, o6, is_async=True)
        o7 = warpgroup_mma(a7, pt, o7, is_async=True)
        o4, o5, o6, o7 = warpgroup_mma_wait(num_outstanding=0, deps=(o4, o5, o6, o7))

    async_copy.wait_group(0)  # the phantom copy past the last block
    l_i = gl.sum(l_acc, 0)
    out_heads = tile * BLOCK_H + gl.arange(0, BLOCK_H, layout=cols_layout)
    out_ok = out_heads < NUM_HEADS
    out_off = _head_rows(
        out_ptr, row, out_heads, split, NUM_HEADS, LORA, stride_buf_b, stride_buf_h, stride_buf_s
    )
    if out_ptr is None:
        dst_ptr = buf_ptr
        norm = kv_scale / l_i
    else:
        dst_ptr = out_ptr
        norm, lse = _one_split_result(kv_scale / l_i, (m_i + gl.log2(l_i)) * _LN2, True)
    # The partials through the ring, dead once every warp is past its last reads (the
    # barrier): a pair's tile stored in the dims' order, read back by rows, so that a
    # warp's store writes 32 consecutive dims (from the accumulators, 8 dims four apart
    # of 4 heads: four times the sectors).
    gl.thread_barrier()
    st0 = _stage_pair(lat0, o0, o1, norm)
    st1 = _stage_pair(lat1, o2, o3, norm)
    st2 = _stage_pair(lat2, o4, o5, norm)
    st3 = _stage_pair(lat3, o6, o7, norm)
    gl.thread_barrier()
    row_heads = tile * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, _PAIR_ROWS_LAYOUT))
    row_ok = row_heads < NUM_HEADS
    row_off = _head_rows(
        out_ptr, row, row_heads, split, NUM_HEADS, LORA, stride_buf_b, stride_buf_h, stride_buf_s
    )
    _store_pair(dst_ptr, row_off, row_ok, st0, 0)
    _store_pair(dst_ptr, row_off, row_ok, st1, 1)
    _store_pair(dst_ptr, row_off, row_ok, st2, 2)
    _store_pair(dst_ptr, row_off, row_ok, st3, 3)
    if out_ptr is None:
        lse = (m_i + gl.log2(l_i)) * _LN2
        gl.store(buf_ptr + out_off + LORA, lse, mask=out_ok)
    else:
        gl.store(lse_ptr + row * NUM_HEADS + out_heads, lse, mask=out_ok)


@gluon.jit
def mla_decode_stage1_gluon_h16(
    q_nope_ptr,
    q_pe_ptr,
    kv_ptr,
    block_table_ptr,
    seq_lens_ptr,
    num_splits_ptr,
    kv_scale_ptr,
    buf_in_ptr,  # noqa: ARG001 (the aliased buffer as an input, never read)
    buf_ptr,
    out_ptr,
    lse_ptr,
    SM_SCALE: gl.constexpr,
    NUM_HEADS: gl.constexpr,
    PAGE_SIZE: gl.constexpr,
    NUM_PAGES: gl.constexpr,
    CAPACITY: gl.constexpr,
    LORA: gl.constexpr,
    ROPE: gl.constexpr,
    stride_qn_b: gl.constexpr,
    stride_qn_h: gl.constexpr,
    stride_qp_b: gl.constexpr,
    stride_qp_h: gl.constexpr,
    QP_OFFSET: gl.constexpr,
    stride_kv_page: gl.constexpr,
    stride_kv_row: gl.constexpr,
    stride_bt_b: gl.constexpr,
    stride_buf_b: gl.constexpr,
    stride_buf_h: gl.constexpr,
    stride_buf_s: gl.constexpr,
    BLOCK_H: gl.constexpr,
    BLOCK_N: gl.constexpr,
    BF16_PARTIALS: gl.constexpr,
):
    """Stage 1 for a 16-bit cache at 16-head tiles, tokens on the MMAs' M (the module
    docstring): two latent slots filled by ``cp.async`` (block j + 1 in flight while
    block j is multiplied), every MMA operand from shared memory. 168,192 bytes of
    shared memory: one CTA an SM."""
    gl.static_assert(PAGE_SIZE % BLOCK_N == 0, "blocks must lie inside one page")
    gl.static_assert(gl.num_warps() == 4, "one warpgroup")
    gl.static_assert(BLOCK_N == 64, "a block is one warpgroup MMA's M")
    dtype: gl.constexpr = q_nope_ptr.dtype.element_ty
    gl.static_assert(kv_ptr.dtype.element_ty == dtype, "a cache of q's dtype")

    tile = gl.program_id(0)
    row = gl.program_id(1)
    split = gl.program_id(2)
    _, start, end = _split_bounds(
        seq_lens_ptr, num_splits_ptr, row, split, out_ptr is not None, CAPACITY
    )
    if end <= start:
        if out_ptr is not None:
            _write_empty_row(out_ptr, lse_ptr, tile, row, NUM_HEADS, LORA, BLOCK_H)
        return

    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_H, 16]
    )
    cols_layout: gl.constexpr = gl.SliceLayout(0, mma_layout)
    rows_layout: gl.constexpr = gl.SliceLayout(1, mma_layout)
    q_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    q_nope_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, LORA], dtype)
    q_pe_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, ROPE], dtype)
    p_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_H], dtype)
    kv_c_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, LORA], dtype)
    k_pe_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, ROPE], dtype)
    q_nope_smem = gl.allocate_shared_memory(dtype, [1, BLOCK_H, LORA], q_nope_layout)
    q_pe_smem = gl.allocate_shared_memory(dtype, [1, BLOCK_H, ROPE], q_pe_layout)
    pt_smem = gl.allocate_shared_memory(dtype, [1, BLOCK_N, BLOCK_H], p_layout)
    kv_c_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, LORA], kv_c_layout)
    k_pe_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, ROPE], k_pe_layout)

    bt_row = block_table_ptr + row * stride_bt_b
    first = start - start % BLOCK_N
    page = gl.load(bt_row + first // PAGE_SIZE)
    _copy_query(
        q_nope_smem.index(0),
        q_pe_smem.index(0),
        q_nope_ptr,
        q_pe_ptr,
        tile,
        row,
        NUM_HEADS,
        BLOCK_H,
        LORA,
        ROPE,
        QP_OFFSET,
        stride_qn_b,
        stride_qn_h,
        stride_qp_b,
        stride_qp_h,
        q_layout,
    )
    _copy_block_rows(
        kv_c_smem.index(0),
        k_pe_smem.index(0),
        kv_ptr,
        page,
        first,
        start,
        end,
        PAGE_SIZE,
        NUM_PAGES,
        LORA,
        ROPE,
        BLOCK_N,
        stride_kv_page,
        stride_kv_row,
    )
    async_copy.commit_group()  # Q and the first block: waited at the first block
    page = gl.load(bt_row + (first + BLOCK_N) // PAGE_SIZE, mask=first + BLOCK_N < end, other=0)

    kv_scale = gl.load(kv_scale_ptr)
    qk_scale = SM_SCALE * _LOG2E * kv_scale
    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=cols_layout)
    l_acc = gl.zeros([BLOCK_N, BLOCK_H], gl.float32, layout=mma_layout)
    o = gl.zeros([LORA, BLOCK_H], gl.float32, layout=mma_layout)
    s = gl.zeros([BLOCK_N, BLOCK_H], gl.float32, layout=mma_layout)
    s_rows = gl.arange(0, BLOCK_N, layout=rows_layout)

    for n0 in range(first, end, BLOCK_N):
        stage = ((n0 - first) // BLOCK_N) & 1
        z = _opaque_zero(n0)
        q_nope = q_nope_smem.index(z)
        q_pe = q_pe_smem.index(z)
        pt = pt_smem.index(z)
        # This block has landed (this thread's copies, then, past the barrier, every
        # thread's); every warp is past the last block's MMAs on the other slot, so the
        # next block may be copied there and P^T overwritten.
        async_copy.wait_group(0)
        fence_async_shared()  # cp.async wrote through the generic proxy; wgmma reads async
        gl.thread_barrier()
        # The page index two blocks ahead first: the copies issued after it would
        # otherwise stand before it in the load queue.
        nxt = n0 + BLOCK_N
        page_after = gl.load(
            bt_row + (nxt + BLOCK_N) // PAGE_SIZE, mask=nxt + BLOCK_N < end, other=0
        )
        _copy_block_rows(
            kv_c_smem.index(1 - stage),
            k_pe_smem.index(1 - stage),
            kv_ptr,
            page,
            nxt,
            start,
            end,
            PAGE_SIZE,
            NUM_PAGES,
            LORA,
            ROPE,
            BLOCK_N,
            stride_kv_page,
            stride_kv_row,
        )
        async_copy.commit_group()
        page = page_after
        kv_c = kv_c_smem.index(stage)
        k_pe = k_pe_smem.index(stage)
        # S^T = K Q^T: K from its slot, Q seen transposed (K-major).
        s = warpgroup_mma(kv_c, q_nope.permute((1, 0)), s, use_acc=False, is_async=True)
        s = warpgroup_mma(k_pe, q_pe.permute((1, 0)), s, is_async=True)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
        tokens = n0 + s_rows
        live = (tokens >= start) & (tokens < end)
        m_i, l_acc, o_tiles = _column_softmax(s, qk_scale, live, m_i, l_acc, (o,), pt, n0)
        o = o_tiles[0]
        # O^T += V^T P^T: V^T is the slot's latent part seen transposed (M-major), 8
        # M-tiles of 64 dims.
        o = warpgroup_mma(kv_c.permute((1, 0)), pt, o, is_async=True)
        o = warpgroup_mma_wait(num_outstanding=0, deps=(o,))

    async_copy.wait_group(0)  # the phantom copy past the last block
    l_i = gl.sum(l_acc, 0)
    # By heads for the stores: a warp writes a head's consecutive dims.
    by_heads: gl.constexpr = gl.BlockedLayout([1, 2], [1, 32], [4, 1], [1, 0])
    acc = gl.convert_layout(gl.permute(o, (1, 0)), by_heads)
    _write_partials(
        buf_ptr,
        out_ptr,
        lse_ptr,
        acc,
        l_i,
        m_i,
        kv_scale,
        tile,
        row,
        split,
        True,
        None,
        0,
        True,
        BF16_PARTIALS,
        NUM_HEADS,
        LORA,
        BLOCK_H,
        stride_buf_b,
        stride_buf_h,
        stride_buf_s,
    )


# --------------------------------------------------------------------------------------
# The 16-bit kernel: the seesaw schedule (see the module docstring).


@gluon.jit
def _seesaw_copy_block(
    kv_c_dst,
    k_pe_dst,
    c8_dst,
    pe8_dst,
    kv_c_desc,
    k_pe_desc,
    kv_ptr,
    page,
    n0,
    start,
    end,
    ready,
    PAGE_SIZE: gl.constexpr,
    NUM_PAGES: gl.constexpr,
    LORA: gl.constexpr,
    ROPE: gl.constexpr,
    BLOCK_N: gl.constexpr,
    stride_kv_page: gl.constexpr,
    stride_kv_row: gl.constexpr,
):
    """The block at token ``n0`` (raw page index ``page``) into a slot, signalling
    ``ready`` (count 1) when it has landed. A block wholly inside ``[start, end)``
    comes by TMA (the latent columns in eight 64-column boxes, the rope ones in one,
    each issued by one thread of a warp; the barrier expects their bytes). A block
    with rows outside it (a split's first or last block, or the phantom second block
    of an odd count, all outside) comes by ``cp.async`` from the warpgroup's 128
    threads, those rows zero-filled so that no value outside the row's tokens reaches
    an MMA (``_arrive_once_landed``).

    An fp8 block always comes by ``cp.async``, into the slot's fp8 views (``c8_dst``:
    ``[8 * BLOCK_N, 64]``, 64-column latent chunk ``c`` in rows ``64 c`` to
    ``64 c + 63``; ``pe8_dst``: the rope columns), which ``_widen_slot`` widens in
    place."""
    if kv_ptr.dtype.element_ty == gl.float8e4nv:
        layout: gl.constexpr = gl.BlockedLayout([1, 16], [8, 4], [4, 1], [1, 0])
        j = gl.arange(0, 8 * BLOCK_N, layout=gl.SliceLayout(1, layout))
        cols = gl.arange(0, 64, layout=gl.SliceLayout(0, layout))
        page_base = kv_ptr + _safe_page(page, NUM_PAGES).to(gl.int64) * stride_kv_page
        r = j % BLOCK_N
        ok = (n0 + r >= start) & (n0 + r < end)
        ptrs = page_base + ((n0 % PAGE_SIZE + r) * stride_kv_row + (j // BLOCK_N) * 64)[:, None]
        async_copy.async_copy_global_to_shared(c8_dst, ptrs + cols[None, :], mask=ok[:, None])
        r = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, layout))
        ok = (n0 + r >= start) & (n0 + r < end)
        _copy_rows(pe8_dst, page_base + LORA, n0 % PAGE_SIZE + r, ok, stride_kv_row, ROPE, layout)
        _arrive_once_landed(ready)
    elif (n0 >= start) & (n0 + BLOCK_N <= end):
        row0 = _safe_page(page, NUM_PAGES) * PAGE_SIZE + n0 % PAGE_SIZE
        mbarrier.expect(ready, BLOCK_N * (LORA + ROPE) * kv_c_dst.dtype.primitive_bitwidth // 8)
        tma.async_copy_global_to_shared(kv_c_desc, [row0, 0], ready, kv_c_dst)
        tma.async_copy_global_to_shared(k_pe_desc, [row0, 0], ready, k_pe_dst)
    else:
        _copy_block_rows(
            kv_c_dst,
            k_pe_dst,
            kv_ptr,
            page,
            n0,
            start,
            end,
            PAGE_SIZE,
            NUM_PAGES,
            LORA,
            ROPE,
            BLOCK_N,
            stride_kv_page,
            stride_kv_row,
        )
        _arrive_once_landed(ready)


@gluon.jit
def _copy_block_rows(
    kv_c_dst,
    k_pe_dst,
    kv_ptr,
    page,
    n0,
    start,
    end,
    PAGE_SIZE: gl.constexpr,
    NUM_PAGES: gl.constexpr,
    LORA: gl.constexpr,
    ROPE: gl.constexpr,
    BLOCK_N: gl.constexpr,
    stride_kv_page: gl.constexpr,
    stride_kv_row: gl.constexpr,
):
    """Issues the ``cp.async`` copies of the 16-bit block at token ``n0`` (raw page index
    ``page``) into a slot (``kv_c_dst``: its latent columns, ``k_pe_dst``: its rope
    ones), by one warpgroup's 128 threads; rows outside ``[start, end)`` are
    zero-filled, so no value outside the split reaches an MMA. Commits no group."""
    copy_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    offs = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, copy_layout))
    page_base = kv_ptr + _safe_page(page, NUM_PAGES).to(gl.int64) * stride_kv_page
    # The rows as rows of the page (not of the block from a block base): element
    # offsets that change block to block are not hoisted out of the loop, where 36
    # 64-bit offsets a thread would spill.
    rows = n0 % PAGE_SIZE + offs
    ok = (n0 + offs >= start) & (n0 + offs < end)
    _copy_rows(kv_c_dst, page_base, rows, ok, stride_kv_row, LORA, copy_layout)
    _copy_rows(k_pe_dst, page_base + LORA, rows, ok, stride_kv_row, ROPE, copy_layout)


@gluon.jit
def _arrive_once_landed(ready):
    """Completes ``ready`` (count 1) once this warpgroup's ``cp.async`` copies so far
    have landed: each thread's ``cp.async.mbarrier.arrive`` adds a pending arrival that
    its copies complete, then, after a warpgroup barrier, one plain arrival."""
    async_copy.mbarrier_arrive(ready, increment_count=True)
    gl.thread_barrier()
    mbarrier.arrive(ready)


@gluon.jit
def _widen_slot(kv_c, k_pe, c8, pe8):
    """Widens a slot's fp8 block in place into fp16 (one warpgroup; e4m3 widens to fp16
    exactly, ``cvt.rn.f16x2.e4m3x2``). ``c8`` (``[8 * 64, 64]`` fp8, latent chunk ``c``
    in rows ``64 c``...) lies on the front half of ``kv_c`` (``[64, 512]`` fp16, whose
    64-column chunk ``c`` is its bytes ``[8c, 8c + 8)`` KB); ``pe8`` is the slot's own
    rope staging. Chunk ``c`` is read from ``4c`` KB and written to ``8c`` KB, from 7
    down: chunks 7-4 land in the back half, above every fp8 byte; 3 and 2 over 4-7's,
    so after a barrier; 1 and 0 over 0-3's, so after a second one, all four read by
    then. Ends with the slot published to this warpgroup's MMAs (fence + barrier)."""
    # 8 bytes a thread, 8 threads a row: a half-warp's loads read 128 contiguous fp8
    # bytes, a quarter-warp's 16-byte stores one row's eight swizzled 16-byte units.
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    dtype: gl.constexpr = kv_c.dtype
    for c in gl.static_range(4):
        x = c8.slice(64 * (7 - c), 64).load(layout)
        kv_c.slice(64 * (7 - c), 64, dim=1).store(x.to(dtype))
    pe = pe8.load(layout)
    k_pe.store(pe.to(dtype))
    x3 = c8.slice(192, 64).load(layout)
    x2 = c8.slice(128, 64).load(layout)
    gl.thread_barrier()
    kv_c.slice(192, 64, dim=1).store(x3.to(dtype))
    kv_c.slice(128, 64, dim=1).store(x2.to(dtype))
    x1 = c8.slice(64, 64).load(layout)
    x0 = c8.slice(0, 64).load(layout)
    gl.thread_barrier()
    kv_c.slice(64, 64, dim=1).store(x1.to(dtype))
    kv_c.slice(0, 64, dim=1).store(x0.to(dtype))
    fence_async_shared()  # generic-proxy stores, read by wgmma through the async one
    gl.thread_barrier()


@gluon.jit
def _seesaw_qk(q_nope, q_pe, kv_c, k_pe, s_init):
    """S = Q K^T of a slot's block (its ready barrier waited; from an fp8 cache,
    widened by ``_widen_slot``), issued async (the caller waits)."""
    fence_async_shared()  # cp.async wrote through the generic proxy; wgmma reads async
    s = warpgroup_mma(q_nope, kv_c.permute((1, 0)), s_init, use_acc=False, is_async=True)
    return warpgroup_mma(q_pe, k_pe.permute((1, 0)), s, is_async=True)


@gluon.jit
def _seesaw_q_f16(q_nope16, q_pe16, q_nope, q_pe, LORA: gl.constexpr):
    """The landed bf16 query tile (``q_nope16``/``q_pe16``, bf16 views) rewritten in
    place as fp16 (``q_nope``/``q_pe``, fp16 views of the same bytes), each head scaled
    by the power of two that puts its largest finite magnitude in ``[2^14, 2^15)``
    (``_copy_query_f16``'s rule). Returns each head's logit factor, the inverse (one
    warpgroup; a thread rewrites only what it read)."""
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    amax = _finite_amax(q_pe16.load(layout).to(gl.float32))
    for c in gl.static_range(LORA // 64):
        x = q_nope16.slice(64 * c, 64, dim=1).load(layout).to(gl.float32)
        amax = gl.maximum(amax, _finite_amax(x))
    scale, logit_factor = _f16_head_scale(amax)
    x = q_pe16.load(layout).to(gl.float32)
    q_pe.store((x * scale[:, None]).to(gl.float16))
    for c in gl.static_range(LORA // 64):
        x = q_nope16.slice(64 * c, 64, dim=1).load(layout).to(gl.float32)
        q_nope.slice(64 * c, 64, dim=1).store((x * scale[:, None]).to(gl.float16))
    return logit_factor


@gluon.jit
def _opaque_zero(i):
    """0, which the compiler cannot see through (it depends on ``i``)."""
    return gl.inline_asm_elementwise(
        "and.b32 $0, $1, 0;", "=r,r", [i], dtype=gl.int32, is_pure=True, pack=1
    )


@gluon.jit
def _seesaw_wg0(
    q_nope_smem,
    q_pe_smem,
    q16_nope_smem,
    q16_pe_smem,
    f_smem,
    kv_c_smem,
    k_pe_smem,
    c8_smem,
    pe8_smem,
    m_smem,
    l_smem,
    bars,
    buf_ptr,
    out_ptr,
    lse_ptr,
    kv_scale,
    qk_scale,
    tile,
    row,
    split,
    valid,
    first,
    start,
    end,
    num_pairs,
    live_splits,
    kv_ptr,
    bt_row,
    NUM_HEADS: gl.constexpr,
    PAGE_SIZE: gl.constexpr,
    NUM_PAGES: gl.constexpr,
    LORA: gl.constexpr,
    ROPE: gl.constexpr,
    BLOCK_H: gl.constexpr,
    BLOCK_N: gl.constexpr,
    CLUSTER: gl.constexpr,
    BF16_PARTIALS: gl.constexpr,
    stride_kv_page: gl.constexpr,
    stride_kv_row: gl.constexpr,
    stride_buf_b: gl.constexpr,
    stride_buf_h: gl.constexpr,
    stride_buf_s: gl.constexpr,
):
    """Warpgroup 0 (the default partition): S and P of the even blocks (slot 0), and
    O_L (output columns 0-255) over every block. See "Seesaw schedule"."""
    dtype: gl.constexpr = kv_c_smem.dtype
    HALF: gl.constexpr = LORA // 2
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HALF, 16]
    )
    p_op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    s_rows: gl.constexpr = gl.SliceLayout(1, s_layout)
    o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
    ready0 = bars.index(0)
    ready1 = bars.index(1)
    p0_bar = bars.index(2)
    p1_bar = bars.index(3)
    free0 = bars.index(4)
    free1 = bars.index(5)
    l0_bar = bars.index(6)
    l1_bar = bars.index(7)

    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=s_rows)
    l_i = gl.zeros([BLOCK_H], gl.float32, layout=s_rows)
    acc = gl.zeros([BLOCK_H, HALF], gl.float32, layout=o_layout)
    s_init = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, layout=s_layout)
    s_cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    F16Q: gl.constexpr = q_nope_smem.dtype != q16_nope_smem.dtype
    FP8: gl.constexpr = c8_smem.dtype == gl.float8e4nv
    if F16Q:
        # bf16 q, fp16 MMAs: this warpgroup rewrites Q as fp16 once it has landed.
        qk_rows = gl.full([BLOCK_H], 0.0, gl.float32, layout=s_rows)
        if num_pairs > 0:
            mbarrier.wait(ready0, 0)
            factor = _seesaw_q_f16(
                q16_nope_smem.index(0),
                q16_pe_smem.index(0),
                q_nope_smem.index(0),
                q_pe_smem.index(0),
                LORA,
            )
            f_smem.store(factor)
            fence_async_shared()  # generic stores, read by wgmma through the async proxy
            mbarrier.arrive(bars.index(8))
            qk_rows = gl.convert_layout(factor, s_rows) * qk_scale
    if FP8 and num_pairs > 0:
        # On an fp8 cache this warpgroup widens each even block as soon as it has
        # landed: the first here, the others under the pair before's P1 V1_L.
        mbarrier.wait(ready0, 0)
        _widen_slot(kv_c_smem.index(0), k_pe_smem.index(0), c8_smem.index(0), pe8_smem.index(0))

    for i in range(num_pairs):
        ph = i & 1
        n0 = first + 2 * i * BLOCK_N
        # Slot 0 holds the even block, slot 1 the odd one; P of each goes over its
        # block's k_pe once QK^T is done with it. The views are indexed by an opaque
        # 0 so that their wgmma descriptors are rebuilt each pair: hoisted out of
        # the loop, Q's 36 alone would pin 72 registers (and spill).
        z = _opaque_zero(i)
        q_nope = q_nope_smem.index(z)
        q_pe = q_pe_smem.index(z)
        kv_c0 = kv_c_smem.index(z)
        kv_c1 = kv_c_smem.index(z + 1)
        p0_smem = k_pe_smem.index(z)
        p1_smem = k_pe_smem.index(z + 1)
        if FP8:
            # On an fp8 cache this warpgroup refills slot 0: the next pair's even
            # block's page index, a pair ahead of its copy.
            more = i + 1 < num_pairs
            nxt0 = n0 + 2 * BLOCK_N
            page0 = gl.load(bt_row + nxt0 // PAGE_SIZE, mask=more & (nxt0 < end), other=0)
        # (1) S0 = Q K0^T, the whole 64 x 64, once the even block has landed (from
        # an fp8 cache it has been waited and widened already, under the pair
        # before's P1 V1_L or before the loop).
        if not FP8:
            mbarrier.wait(ready0, ph)
        s = _seesaw_qk(q_nope, q_pe, kv_c0, p0_smem, s_init)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
        # (2) softmax of the even block against the running max m_i (lazy rescaling).
        tokens = n0 + s_cols
        live = (tokens >= start) & (tokens < end)
        if F16Q:
            s = gl.where(live[None, :], s * qk_rows[:, None], float("-inf"))
        else:
            s = gl.where(live[None, :], s * qk_scale, float("-inf"))
        m_blk = gl.maximum(m_i, gl.max(s, 1))
        m0 = gl.where(m_blk - m_i > RESCALE_THRESHOLD, m_blk, m_i)
        scale0 = gl.exp2(m_i - m0)
        p = gl.exp2(s - m0[:, None])
        l_i = l_i * scale0 + gl.sum(p, 1)
        pb = p.to(dtype)
        # (3) publish m0 and P0 (into the even block's k_pe: QK^T no longer reads it).
        m_smem.index(ph).store(m0)
        p0_smem.store(pb)
        fence_async_shared()  # P0 is read by warpgroup 1's wgmma (async proxy)
        mbarrier.arrive(p0_bar)
        # (4) O_L = O_L * scale0 + P0 V0_L, P0 from registers; async: runs while
        # warpgroup 1 does its softmax.
        acc = _rescale_rows(acc, scale0, i, o_rows, _WG0_SCALE0_ANY)
        acc = warpgroup_mma(
            gl.convert_layout(pb, p_op_layout), kv_c0.slice(0, HALF, dim=1), acc, is_async=True
        )
        if FP8:
            # While warpgroup 1 does its softmax: once P0 V0_L is done, the next even
            # block into slot 0's front half (free: this warpgroup's S0 and P0 V0_L
            # were its only readers) and rope staging.
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
            if more:
                _seesaw_copy_block(
                    kv_c0,
                    p0_smem,
                    c8_smem.index(2 * z),
                    pe8_smem.index(z),
                    kv_ptr,
                    kv_ptr,
                    kv_ptr,
                    page0,
                    nxt0,
                    start,
                    end,
                    ready0,
                    PAGE_SIZE,
                    NUM_PAGES,
                    LORA,
                    ROPE,
                    BLOCK_N,
                    stride_kv_page,
                    stride_kv_row,
                )
        # (5) warpgroup 1's m1 and P1 (the odd block, over its k_pe).
        mbarrier.wait(p1_bar, ph)
        m1 = m_smem.index(2 + ph).load(s_rows)
        scale1 = gl.exp2(m0 - m1)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        if not FP8:
            mbarrier.arrive(free0)  # done with slot 0 (warpgroup 1 refills it)
        mbarrier.wait(ready1, ph)  # (completed: warpgroup 1 waited it before P1)
        fence_async_shared()
        # (6) O_L = O_L * scale1 + P1 V1_L, P1 from shared memory.
        acc = _rescale_rows(acc, scale1, i, o_rows, _WG0_SCALE1_ANY)
        acc = warpgroup_mma(p1_smem, kv_c1.slice(0, HALF, dim=1), acc, is_async=True)
        if FP8 and more:
            # While P1 V1_L runs: the next even block, once it has landed and warpgroup
            # 1's P0 V0_R is done with slot 0's back half and P0 (vfree0), widened.
            mbarrier.wait(ready0, ph ^ 1)
            mbarrier.wait(bars.index(9), ph)
            _widen_slot(kv_c0, p0_smem, c8_smem.index(2 * z), pe8_smem.index(z))
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(free1)  # done with slot 1
        l_i = l_i * scale1
        m_i = m1

    # The row sum: this warpgroup's (even blocks) plus warpgroup 1's (odd blocks).
    l_smem.index(0).store(l_i)
    mbarrier.arrive(l0_bar)
    mbarrier.wait(l1_bar, 0)
    l_i = l_i + l_smem.index(1).load(s_rows)
    _finish_split(
        buf_ptr,
        out_ptr,
        lse_ptr,
        acc,
        l_i,
        m_i,
        kv_scale,
        tile,
        row,
        split,
        valid,
        q_nope_smem.index(0),  # dead: warpgroup 1's last S came before its last P
        live_splits,
        0,
        True,
        CLUSTER,
        BF16_PARTIALS,
        NUM_HEADS,
        LORA,
        BLOCK_H,
        stride_buf_b,
        stride_buf_h,
        stride_buf_s,
    )


@gluon.jit
def _seesaw_wg1(
    q_nope_smem,
    q_pe_smem,
    q16_nope_smem,
    f_smem,
    kv_c_smem,
    k_pe_smem,
    c8_smem,
    pe8_smem,
    m_smem,
    l_smem,
    bars,
    kv_c_desc,
    k_pe_desc,
    kv_ptr,
    bt_row,
    buf_ptr,
    out_ptr,
    lse_ptr,
    kv_scale,
    qk_scale,
    tile,
    row,
    split,
    valid,
    first,
    start,
    end,
    num_pairs,
    live_splits,
    NUM_HEADS: gl.constexpr,
    PAGE_SIZE: gl.constexpr,
    NUM_PAGES: gl.constexpr,
    LORA: gl.constexpr,
    ROPE: gl.constexpr,
    BLOCK_H: gl.constexpr,
    BLOCK_N: gl.constexpr,
    CLUSTER: gl.constexpr,
    BF16_PARTIALS: gl.constexpr,
    stride_kv_page: gl.constexpr,
    stride_kv_row: gl.constexpr,
    stride_buf_b: gl.constexpr,
    stride_buf_h: gl.constexpr,
    stride_buf_s: gl.constexpr,
):
    """Warpgroup 1 (the worker partition): S and P of the odd blocks (slot 1), O_R
    (output columns 256-511) over every block, and every latent copy after the first
    two. See "Seesaw schedule"."""
    dtype: gl.constexpr = kv_c_smem.dtype
    HALF: gl.constexpr = LORA // 2
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HALF, 16]
    )
    p_op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    s_rows: gl.constexpr = gl.SliceLayout(1, s_layout)
    o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
    ready0 = bars.index(0)
    ready1 = bars.index(1)
    p0_bar = bars.index(2)
    p1_bar = bars.index(3)
    free0 = bars.index(4)
    free1 = bars.index(5)
    l0_bar = bars.index(6)
    l1_bar = bars.index(7)

    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=s_rows)
    l_i = gl.zeros([BLOCK_H], gl.float32, layout=s_rows)
    acc = gl.zeros([BLOCK_H, HALF], gl.float32, layout=o_layout)
    s_init = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, layout=s_layout)
    s_cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    F16Q: gl.constexpr = q_nope_smem.dtype != q16_nope_smem.dtype
    FP8: gl.constexpr = c8_smem.dtype == gl.float8e4nv
    if F16Q:
        qk_rows = gl.full([BLOCK_H], 0.0, gl.float32, layout=s_rows)
        if num_pairs > 0:
            mbarrier.wait(bars.index(8), 0)  # warpgroup 0 rewrote Q as fp16
            qk_rows = f_smem.load(s_rows) * qk_scale

    for i in range(num_pairs):
        ph = i & 1
        n1 = first + (2 * i + 1) * BLOCK_N
        # Slot 0 holds the even block, slot 1 the odd one; P of each goes over its
        # block's k_pe once QK^T is done with it. The views are indexed by an opaque
        # 0 so that their wgmma descriptors are rebuilt each pair: hoisted out of
        # the loop, Q's 36 alone would pin 72 registers (and spill).
        z = _opaque_zero(i)
        q_nope = q_nope_smem.index(z)
        q_pe = q_pe_smem.index(z)
        kv_c0 = kv_c_smem.index(z)
        kv_c1 = kv_c_smem.index(z + 1)
        p0_smem = k_pe_smem.index(z)
        p1_smem = k_pe_smem.index(z + 1)
        more = i + 1 < num_pairs
        # The next pair's page indices, a pair ahead of their copies (raw: checked
        # where used; blocks past the end read nothing). On an fp8 cache warpgroup 0
        # refills slot 0 and loads its page index itself.
        nxt0 = n1 + BLOCK_N
        nxt1 = nxt0 + BLOCK_N
        if not FP8:
            page0 = gl.load(bt_row + nxt0 // PAGE_SIZE, mask=more & (nxt0 < end), other=0)
        page1 = gl.load(bt_row + nxt1 // PAGE_SIZE, mask=more & (nxt1 < end), other=0)
        # (1) S1 = Q K1^T, concurrently with warpgroup 0's S0.
        mbarrier.wait(ready1, ph)
        if FP8:
            _widen_slot(kv_c1, p1_smem, c8_smem.index(2 * z + 2), pe8_smem.index(z + 1))
        s = _seesaw_qk(q_nope, q_pe, kv_c1, p1_smem, s_init)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
        tokens = n1 + s_cols
        live = (tokens >= start) & (tokens < end)
        if F16Q:
            s = gl.where(live[None, :], s * qk_rows[:, None], float("-inf"))
        else:
            s = gl.where(live[None, :], s * qk_scale, float("-inf"))
        # (2) m0 and P0 from warpgroup 0, then O_R = O_R * scale0 + P0 V0_R (P0 from
        # shared memory) issued at once: it runs under this warpgroup's softmax.
        mbarrier.wait(p0_bar, ph)
        m0 = m_smem.index(ph).load(s_rows)
        scale0 = gl.exp2(m_i - m0)
        if not FP8:
            # (completed: warpgroup 0 waited it before P0). On an fp8 cache the block
            # is the one warpgroup 0 widened and published with P0, and ready0 may
            # have completed again already (warpgroup 0's refill under this softmax).
            mbarrier.wait(ready0, ph)
        fence_async_shared()
        acc = _rescale_rows(acc, scale0, i, o_rows, _WG1_SCALE0_ANY)
        acc = warpgroup_mma(p0_smem, kv_c0.slice(HALF, HALF, dim=1), acc, is_async=True)
        # (3) the odd block's softmax against m0, while warpgroup 0's P0 V0_L and this
        # warpgroup's P0 V0_R are on the tensor cores; publish m1 and P1 (over the odd
        # block's k_pe).
        m_blk = gl.maximum(m0, gl.max(s, 1))
        m1 = gl.where(m_blk - m0 > RESCALE_THRESHOLD, m_blk, m0)
        scale1 = gl.exp2(m0 - m1)
        p = gl.exp2(s - m1[:, None])
        l_i = l_i * (scale0 * scale1) + gl.sum(p, 1)
        pb = p.to(dtype)
        m_smem.index(2 + ph).store(m1)
        p1_smem.store(pb)
        fence_async_shared()
        mbarrier.arrive(p1_bar)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        if FP8:
            mbarrier.arrive(bars.index(9))  # vfree0: slot 0's back half and P0 read
        # (5) O_R = O_R * scale1 + P1 V1_R, P1 from registers.
        acc = _rescale_rows(acc, scale1, i, o_rows, _WG1_SCALE1_ANY)
        acc = warpgroup_mma(
            gl.convert_layout(pb, p_op_layout), kv_c1.slice(HALF, HALF, dim=1), acc, is_async=True
        )
        # (6) while P1 V1_R runs: slot 0 is free once warpgroup 0's P0 V0_L is done
        # too; refill it with the next pair's even block.
        if (not FP8) and more:
            mbarrier.wait(free0, ph)
            _seesaw_copy_block(
                kv_c0,
                p0_smem,
                c8_smem.index(2 * z),
                pe8_smem.index(z),
                kv_c_desc,
                k_pe_desc,
                kv_ptr,
                page0,
                nxt0,
                start,
                end,
                ready0,
                PAGE_SIZE,
                NUM_PAGES,
                LORA,
                ROPE,
                BLOCK_N,
                stride_kv_page,
                stride_kv_row,
            )
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        # (7) slot 1, once warpgroup 0's P1 V1_L is done too: the next odd block.
        if more:
            mbarrier.wait(free1, ph)
            _seesaw_copy_block(
                kv_c1,
                p1_smem,
                c8_smem.index(2 * z + 2),
                pe8_smem.index(z + 1),
                kv_c_desc,
                k_pe_desc,
                kv_ptr,
                page1,
                nxt1,
                start,
                end,
                ready1,
                PAGE_SIZE,
                NUM_PAGES,
                LORA,
                ROPE,
                BLOCK_N,
                stride_kv_page,
                stride_kv_row,
            )
        m_i = m1

    l_smem.index(1).store(l_i)
    mbarrier.arrive(l1_bar)
    mbarrier.wait(l0_bar, 0)
    l_i = l_i + l_smem.index(0).load(s_rows)
    _finish_split(
        buf_ptr,
        out_ptr,
        lse_ptr,
        acc,
        l_i,
        m_i,
        kv_scale,
        tile,
        row,
        split,
        valid,
        kv_c_smem.index(0),  # warpgroup 0 arrived l0 after its last MMA
        live_splits,
        LORA // 2,
        False,
        CLUSTER,
        BF16_PARTIALS,
        NUM_HEADS,
        LORA,
        BLOCK_H,
        stride_buf_b,
        stride_buf_h,
        stride_buf_s,
    )


@gluon.jit
def mla_decode_stage1_gluon_seesaw(
    q_nope_ptr,
    q_pe_ptr,
    kv_ptr,
    block_table_ptr,
    seq_lens_ptr,
    num_splits_ptr,
    kv_scale_ptr,
    buf_in_ptr,  # noqa: ARG001 (the aliased buffer as an input, never read)
    buf_ptr,
    out_ptr,
    lse_ptr,
    SM_SCALE: gl.constexpr,
    NUM_HEADS: gl.constexpr,
    PAGE_SIZE: gl.constexpr,
    NUM_PAGES: gl.constexpr,
    CAPACITY: gl.constexpr,
    LORA: gl.constexpr,
    ROPE: gl.constexpr,
    stride_qn_b: gl.constexpr,
    stride_qn_h: gl.constexpr,
    stride_qp_b: gl.constexpr,
    stride_qp_h: gl.constexpr,
    QP_OFFSET: gl.constexpr,
    stride_kv_page: gl.constexpr,
    stride_kv_row: gl.constexpr,
    stride_bt_b: gl.constexpr,
    stride_buf_b: gl.constexpr,
    stride_buf_h: gl.constexpr,
    stride_buf_s: gl.constexpr,
    BLOCK_H: gl.constexpr,
    BLOCK_N: gl.constexpr,
    CLUSTER: gl.constexpr,
    BF16_PARTIALS: gl.constexpr,
):
    gl.static_assert(PAGE_SIZE % BLOCK_N == 0, "blocks must lie inside one page")
    gl.static_assert(gl.num_warps() == 4, "one warpgroup here, the worker adds the other")
    FP8: gl.constexpr = kv_ptr.dtype.element_ty == gl.float8e4nv
    q_dtype: gl.constexpr = q_nope_ptr.dtype.element_ty
    # The MMAs' dtype: q's for a 16-bit cache, fp16 for an fp8 one (a block widens to
    # fp16 in one conversion for two values; bf16 q is rewritten as fp16, its heads
    # scaled, _seesaw_q_f16).
    dtype: gl.constexpr = gl.float16 if FP8 else q_dtype

    if CLUSTER > 1:
        # A row's splits are one cluster, its CTAs consecutive along the grid's x.
        tile = gl.program_id(0) // CLUSTER
        split = gl.program_id(0) % CLUSTER
    else:
        tile = gl.program_id(0)
        split = gl.program_id(2)
    row = gl.program_id(1)
    # No early return (the worker warpgroup must still be started and stopped, and in a
    # cluster every thread must reach the merge's barrier): an empty or surplus split
    # runs no pair and stores no partial (with one split, an empty row's output and
    # lse, _write_partials).
    num_splits, start, end = _split_bounds(
        seq_lens_ptr, num_splits_ptr, row, split, CLUSTER == 1 and out_ptr is not None, CAPACITY
    )
    if CLUSTER > 1:
        live_splits = _live_splits(seq_lens_ptr, row, num_splits, CAPACITY)
    else:
        live_splits = 0  # unused
    valid = (split < num_splits) & (end > start)
    first = start - start % BLOCK_N
    num_blocks = gl.where(valid, (end - first + BLOCK_N - 1) // BLOCK_N, 0)
    num_pairs = (num_blocks + 1) // 2

    nope_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, LORA], dtype)
    rope_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, ROPE], dtype)
    vec_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    q_nope_smem = gl.allocate_shared_memory(dtype, [1, BLOCK_H, LORA], nope_layout)
    q_pe_smem = gl.allocate_shared_memory(dtype, [1, BLOCK_H, ROPE], rope_layout)
    kv_c_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, LORA], nope_layout)
    k_pe_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, ROPE], rope_layout)
    # m exchange: [0, 1] m0 of even/odd pairs (warpgroup 0 -> 1), [2, 3] m1 (1 -> 0).
    m_smem = gl.allocate_shared_memory(gl.float32, [4, BLOCK_H], vec_layout)
    l_smem = gl.allocate_shared_memory(gl.float32, [2, BLOCK_H], vec_layout)
    # ready0/1 (a block landed, _seesaw_copy_block), p0/p1 (P and m published),
    # free0/1 (warpgroup 0 done with a slot), l0/l1 (row sums published),
    # for fp16 MMAs on bf16 q qready (warpgroup 0 rewrote Q as fp16), and on an fp8
    # cache vfree0 (warpgroup 1's P0 V0_R done: slot 0's back half and P0 read).
    NUM_BARS: gl.constexpr = 10 if FP8 else 8 if dtype == q_dtype else 9
    bars = gl.allocate_shared_memory(gl.int64, [NUM_BARS, 1], mbarrier.MBarrierLayout())
    for b in gl.static_range(NUM_BARS):
        mbarrier.init(bars.index(b), count=1)
    if dtype != q_dtype:
        f_smem = gl.allocate_shared_memory(gl.float32, [BLOCK_H], vec_layout)
        q16_nope_smem = q_nope_smem._reinterpret(q_dtype, [1, BLOCK_H, LORA], nope_layout)
        q16_pe_smem = q_pe_smem._reinterpret(q_dtype, [1, BLOCK_H, ROPE], rope_layout)
    else:
        f_smem = l_smem  # unused
        q16_nope_smem = q_nope_smem
        q16_pe_smem = q_pe_smem
    if FP8:
        # An fp8 block's latent part lands in the front half of its slot's bytes
        # (``_widen_slot``), by 64-column chunks, chunk-major: slot s's is view 2 s
        # ([8 * BLOCK_N, 64]); its rope part in the slot's own staging.
        kv_dtype: gl.constexpr = kv_ptr.dtype.element_ty
        stage_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
        c8_smem = kv_c_smem._reinterpret(kv_dtype, [4, 8 * BLOCK_N, 64], stage_layout)
        pe8_smem = gl.allocate_shared_memory(kv_dtype, [2, BLOCK_N, ROPE], stage_layout)
        c8_first = c8_smem.index(0)
        pe8_first = pe8_smem.index(0)
        c8_second = c8_smem.index(2)
        pe8_second = pe8_smem.index(1)
        kv_c_desc = kv_ptr  # no TMA: unused (warp_specialize takes no None)
        k_pe_desc = kv_c_desc
    else:
        c8_smem = kv_c_smem
        pe8_smem = k_pe_smem
        c8_first = kv_c_smem.index(0)
        pe8_first = k_pe_smem.index(0)
        c8_second = kv_c_smem.index(1)
        pe8_second = k_pe_smem.index(1)
        # TMA descriptors of the cache as rows of tokens (pages back to back), made
        # here in the program's global scratch: the latent and the rope columns.
        gl.static_assert(stride_kv_page == PAGE_SIZE * stride_kv_row, "pages back to back")
        tokens: gl.constexpr = NUM_PAGES * PAGE_SIZE
        kv_c_desc = tma.make_tensor_descriptor(
            kv_ptr, [tokens, LORA], [stride_kv_row, 1], [BLOCK_N, LORA], nope_layout
        )
        k_pe_desc = tma.make_tensor_descriptor(
            kv_ptr + LORA, [tokens, ROPE], [stride_kv_row, 1], [BLOCK_N, ROPE], rope_layout
        )

    bt_row = block_table_ptr + row * stride_bt_b
    if num_pairs > 0:
        # The first two blocks' page indices are read before Q's copies are issued:
        # behind Q's 72 KB a read waits for them, and the blocks' copies for it.
        page0 = gl.load(bt_row + first // PAGE_SIZE)
        page1 = gl.load(
            bt_row + (first + BLOCK_N) // PAGE_SIZE, mask=first + BLOCK_N < end, other=0
        )
        # Q, then the first two blocks (the second may be past the end: zeros), each
        # block signalling its slot's ready barrier. Both barriers wait for Q too: each
        # thread's cp.async.mbarrier.arrive on them adds a pending arrival that its Q
        # copies complete, all before the blocks' own arrivals (the warpgroup barrier).
        copy_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
        _copy_query(
            q16_nope_smem.index(0),
            q16_pe_smem.index(0),
            q_nope_ptr,
            q_pe_ptr,
            tile,
            row,
            NUM_HEADS,
            BLOCK_H,
            LORA,
            ROPE,
            QP_OFFSET,
            stride_qn_b,
            stride_qn_h,
            stride_qp_b,
            stride_qp_h,
            copy_layout,
        )
        async_copy.mbarrier_arrive(bars.index(0), increment_count=True)
        async_copy.mbarrier_arrive(bars.index(1), increment_count=True)
        gl.thread_barrier()
        _seesaw_copy_block(
            kv_c_smem.index(0),
            k_pe_smem.index(0),
            c8_first,
            pe8_first,
            kv_c_desc,
            k_pe_desc,
            kv_ptr,
            page0,
            first,
            start,
            end,
            bars.index(0),
            PAGE_SIZE,
            NUM_PAGES,
            LORA,
            ROPE,
            BLOCK_N,
            stride_kv_page,
            stride_kv_row,
        )
        _seesaw_copy_block(
            kv_c_smem.index(1),
            k_pe_smem.index(1),
            c8_second,
            pe8_second,
            kv_c_desc,
            k_pe_desc,
            kv_ptr,
            page1,
            first + BLOCK_N,
            start,
            end,
            bars.index(1),
            PAGE_SIZE,
            NUM_PAGES,
            LORA,
            ROPE,
            BLOCK_N,
            stride_kv_page,
            stride_kv_row,
        )

    kv_scale = gl.load(kv_scale_ptr)
    qk_scale = SM_SCALE * _LOG2E * kv_scale
    gl.warp_specialize(
        [
            (
                _seesaw_wg0,
                (
                    q_nope_smem,
                    q_pe_smem,
                    q16_nope_smem,
                    q16_pe_smem,
                    f_smem,
                    kv_c_smem,
                    k_pe_smem,
                    c8_smem,
                    pe8_smem,
                    m_smem,
                    l_smem,
                    bars,
                    buf_ptr,
                    out_ptr,
                    lse_ptr,
                    kv_scale,
                    qk_scale,
                    tile,
                    row,
                    split,
                    valid,
                    first,
                    start,
                    end,
                    num_pairs,
                    live_splits,
                    kv_ptr,
                    bt_row,
                    NUM_HEADS,
                    PAGE_SIZE,
                    NUM_PAGES,
                    LORA,
                    ROPE,
                    BLOCK_H,
                    BLOCK_N,
                    CLUSTER,
                    BF16_PARTIALS,
                    stride_kv_page,
                    stride_kv_row,
                    stride_buf_b,
                    stride_buf_h,
                    stride_buf_s,
                ),
            ),
            (
                _seesaw_wg1,
                (
                    q_nope_smem,
                    q_pe_smem,
                    q16_nope_smem,
                    f_smem,
                    kv_c_smem,
                    k_pe_smem,
                    c8_smem,
                    pe8_smem,
                    m_smem,
                    l_smem,
                    bars,
                    kv_c_desc,
                    k_pe_desc,
                    kv_ptr,
                    bt_row,
                    buf_ptr,
                    out_ptr,
                    lse_ptr,
                    kv_scale,
                    qk_scale,
                    tile,
                    row,
                    split,
                    valid,
                    first,
                    start,
                    end,
                    num_pairs,
                    live_splits,
                    NUM_HEADS,
                    PAGE_SIZE,
                    NUM_PAGES,
                    LORA,
                    ROPE,
                    BLOCK_H,
                    BLOCK_N,
                    CLUSTER,
                    BF16_PARTIALS,
                    stride_kv_page,
                    stride_kv_row,
                    stride_buf_b,
                    stride_buf_h,
                    stride_buf_s,
                ),
            ),
        ],
        [4],
        [SEESAW_WORKER_REGS],
    )


# --------------------------------------------------------------------------------------
# The fp8-MMA kernel: q and P in e4m3, opt-in (see the module docstring).

# V's words of a block, fp8 [64 tokens, 512 dims]: a thread holds dims 4u to 4u + 3 of
# u in {16w + 2q, 16w + 2q + 1} (8 consecutive bytes: w its warp, q = lane / 4) for
# tokens 4c + e + 16j + 32k (c = lane % 4; e < 4; j, k < 2), which is where the O^T
# tiles' register A operand wants them (``_vt_operands``).
_VT_WORDS_LAYOUT = gl.constexpr(
    gl.DistributedLinearLayout(
        reg_bases=[[0, 1], [0, 2], [0, 4], [1, 0], [2, 0], [16, 0], [32, 0]],
        lane_bases=[[4, 0], [8, 0], [0, 8], [0, 16], [0, 32]],
        warp_bases=[[0, 64], [0, 128], [0, 256]],
        block_bases=[],
        shape=[64, 512],
    )
)


@gluon.jit
def _vt_operands(x, a_layout: gl.constexpr):
    """The four O^T tiles' register A operands (``[128, 64]`` e4m3: V^T, latent dims by
    tokens) from a block's words (``_VT_WORDS_LAYOUT``). Tile ``t`` row ``r`` is latent
    dim ``4 u + t`` for ``u = 16 (r >> 4) + 2 (r & 7) + ((r >> 3) & 1)``: the operand
    gives a thread rows ``q`` and ``q + 8`` of its warp's 16 and four consecutive tokens
    a register; the words give it four consecutive dims of one token, one for each tile,
    so the change of layout regroups bytes inside each thread and moves nothing between
    threads (asserted at compile time)."""
    x = gl.reshape(x, [64, 8, 8, 2, 4])  # token, w, q, i, t
    x = gl.permute(x, [1, 3, 2, 0, 4])  # w, i, q, token, t
    x = gl.reshape(x, [128, 64, 2, 2])  # r, token, t >> 1, t & 1
    even, odd = gl.split(x)
    a0, a2 = gl.split(even)
    a1, a3 = gl.split(odd)
    return (
        gl.convert_layout(a0, a_layout, assert_trivial=True),
        gl.convert_layout(a1, a_layout, assert_trivial=True),
        gl.convert_layout(a2, a_layout, assert_trivial=True),
        gl.convert_layout(a3, a_layout, assert_trivial=True),
    )


@gluon.jit
def _fp8_mma_copy_block(
    kv8,
    pe8,
    kv_ptr,
    page,
    n0,
    start,
    end,
    PAGE_SIZE: gl.constexpr,
    NUM_PAGES: gl.constexpr,
    LORA: gl.constexpr,
    ROPE: gl.constexpr,
    BLOCK_N: gl.constexpr,
    stride_kv_page: gl.constexpr,
    stride_kv_row: gl.constexpr,
):
    """``cp.async`` of the block at token ``n0`` (raw page index ``page``) into a ring
    stage as it is: its latent bytes (a warp copies one token's 512) and its rope
    bytes; rows outside ``[start, end)`` zero-filled. Commits no group."""
    layout: gl.constexpr = gl.BlockedLayout([1, 16], [1, 32], [gl.num_warps(), 1], [1, 0])
    pe_layout: gl.constexpr = gl.BlockedLayout([1, 16], [8, 4], [gl.num_warps(), 1], [1, 0])
    base = kv_ptr + _safe_page(page, NUM_PAGES).to(gl.int64) * stride_kv_page
    r = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, layout))
    ok = (n0 + r >= start) & (n0 + r < end)
    _copy_rows(kv8, base, n0 % PAGE_SIZE + r, ok, stride_kv_row, LORA, layout)
    r = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, pe_layout))
    ok = (n0 + r >= start) & (n0 + r < end)
    _copy_rows(pe8, base + LORA, n0 % PAGE_SIZE + r, ok, stride_kv_row, ROPE, pe_layout)


@gluon.jit
def _copy_query_e4m3(
    q8_nope,
    q8_pe,
    q_nope_ptr,
    q_pe_ptr,
    tile,
    row,
    NUM_HEADS: gl.constexpr,
    BLOCK_H: gl.constexpr,
    LORA: gl.constexpr,
    ROPE: gl.constexpr,
    QP_OFFSET: gl.constexpr,
    stride_qn_b: gl.constexpr,
    stride_qn_h: gl.constexpr,
    stride_qp_b: gl.constexpr,
    stride_qp_h: gl.constexpr,
):
    """The row's query tile (heads past ``NUM_HEADS`` zero) into shared memory as e4m3,
    each head times ``448 / amax`` (amax: its largest magnitude; 1 for a zero head),
    rounded to nearest. Returns ``amax / 448`` a head (its logits' factor). A NaN in a
    head is not its amax (``max`` skips it) and stays NaN; an infinite amax makes the
    head's scale 0 and its infinities NaN: either way that head's logits are NaN and
    the other heads' untouched. Read twice from global memory (the amax, then the
    values), 128 columns at a time."""
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [gl.num_warps(), 1], [1, 0])
    heads = tile * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, layout))
    ok = (heads < NUM_HEADS)[:, None]
    cols = gl.arange(0, 128, layout=gl.SliceLayout(0, layout))
    rope_cols = gl.arange(0, ROPE, layout=gl.SliceLayout(0, layout))
    q_nope = q_nope_ptr + row * stride_qn_b + heads[:, None] * stride_qn_h
    q_pe = q_pe_ptr + row * stride_qp_b + QP_OFFSET + heads[:, None] * stride_qp_h
    q_pe += rope_cols[None, :]
    amax = gl.max(gl.abs(gl.load(q_pe, mask=ok, other=0.0).to(gl.float32)), 1)
    for c in gl.static_range(LORA // 128):
        x = gl.load(q_nope + 128 * c + cols[None, :], mask=ok, other=0.0).to(gl.float32)
        amax = gl.maximum(amax, gl.max(gl.abs(x), 1))
    amax = gl.where(amax > 0.0, amax, _E4M3_MAX)
    scale = _E4M3_MAX / amax
    x = gl.load(q_pe, mask=ok, other=0.0).to(gl.float32)
    q8_pe.store((x * scale[:, None]).to(gl.float8e4nv))
    for c in gl.static_range(LORA // 128):
        x = gl.load(q_nope + 128 * c + cols[None, :], mask=ok, other=0.0).to(gl.float32)
        q8_nope.slice(128 * c, 128, dim=1).store((x * scale[:, None]).to(gl.float8e4nv))
    return amax / _E4M3_MAX


@gluon.jit
def mla_decode_stage1_gluon_fp8_mma(
    q_nope_ptr,
    q_pe_ptr,
    kv_ptr,
    block_table_ptr,
    seq_lens_ptr,
    num_splits_ptr,
    kv_scale_ptr,
    buf_in_ptr,  # noqa: ARG001 (the aliased buffer as an input, never read)
    buf_ptr,
    out_ptr,
    lse_ptr,
    SM_SCALE: gl.constexpr,
    NUM_HEADS: gl.constexpr,
    PAGE_SIZE: gl.constexpr,
    NUM_PAGES: gl.constexpr,
    CAPACITY: gl.constexpr,
    LORA: gl.constexpr,
    ROPE: gl.constexpr,
    stride_qn_b: gl.constexpr,
    stride_qn_h: gl.constexpr,
    stride_qp_b: gl.constexpr,
    stride_qp_h: gl.constexpr,
    QP_OFFSET: gl.constexpr,
    stride_kv_page: gl.constexpr,
    stride_kv_row: gl.constexpr,
    stride_bt_b: gl.constexpr,
    stride_buf_b: gl.constexpr,
    stride_buf_h: gl.constexpr,
    stride_buf_s: gl.constexpr,
    BLOCK_H: gl.constexpr,
    BLOCK_N: gl.constexpr,
):
    """Stage 1 for an fp8 cache with e4m3 MMAs, q and P rounded to e4m3 (the module
    docstring): 64-head tiles, two warpgroups, the blocks through a ``cp.async`` ring
    of ``FP8_MMA_STAGES`` stages as they are in the cache."""
    gl.static_assert(PAGE_SIZE % BLOCK_N == 0, "blocks must lie inside one page")
    gl.static_assert(gl.num_warps() == 8, "two warpgroups (FP8_MMA_NUM_WARPS)")
    gl.static_assert(BLOCK_H == 64 and BLOCK_N == 64, "64 heads by 64 tokens")
    gl.static_assert(LORA == 512 and ROPE == 64, "DeepSeek's 512 + 64 columns")
    gl.static_assert(kv_ptr.dtype.element_ty == gl.float8e4nv, "a float8_e4m3fn cache")
    f8: gl.constexpr = gl.float8e4nv

    tile = gl.program_id(0)
    row = gl.program_id(1)
    split = gl.program_id(2)
    _, start, end = _split_bounds(
        seq_lens_ptr, num_splits_ptr, row, split, out_ptr is not None, CAPACITY
    )
    if end <= start:
        if out_ptr is not None:
            _write_empty_row(out_ptr, lse_ptr, tile, row, NUM_HEADS, LORA, BLOCK_H)
        return

    # S [64 heads, 64 tokens]: the warpgroups take 32 tokens each. O^T [512, 64] as four
    # [128, 64] tiles: the warpgroups take 64 rows (dims) each.
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 2], instr_shape=[16, 32, 32]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[8, 1], instr_shape=[16, 64, 32]
    )
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=4)
    s_rows: gl.constexpr = gl.SliceLayout(1, s_layout)
    o_cols: gl.constexpr = gl.SliceLayout(0, o_layout)
    nope_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, LORA], f8)
    rope_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, ROPE], f8)
    q8_nope_smem = gl.allocate_shared_memory(f8, [1, BLOCK_H, LORA], nope_layout)
    q8_pe_smem = gl.allocate_shared_memory(f8, [1, BLOCK_H, ROPE], rope_layout)
    kv8_smem = gl.allocate_shared_memory(f8, [FP8_MMA_STAGES, BLOCK_N, LORA], nope_layout)
    pe8_smem = gl.allocate_shared_memory(f8, [FP8_MMA_STAGES, BLOCK_N, ROPE], rope_layout)
    p_smem = gl.allocate_shared_memory(f8, [1, BLOCK_H, BLOCK_N], rope_layout)

    bt_row = block_table_ptr + row * stride_bt_b
    first = start - start % BLOCK_N
    for k in gl.static_range(FP8_MMA_STAGES - 1):
        n = first + k * BLOCK_N
        page = gl.load(bt_row + n // PAGE_SIZE, mask=n < end, other=0)
        _fp8_mma_copy_block(
            kv8_smem.index(k),
            pe8_smem.index(k),
            kv_ptr,
            page,
            n,
            start,
            end,
            PAGE_SIZE,
            NUM_PAGES,
            LORA,
            ROPE,
            BLOCK_N,
            stride_kv_page,
            stride_kv_row,
        )
        async_copy.commit_group()
    factor = _copy_query_e4m3(
        q8_nope_smem.index(0),
        q8_pe_smem.index(0),
        q_nope_ptr,
        q_pe_ptr,
        tile,
        row,
        NUM_HEADS,
        BLOCK_H,
        LORA,
        ROPE,
        QP_OFFSET,
        stride_qn_b,
        stride_qn_h,
        stride_qp_b,
        stride_qp_h,
    )
    kv_scale = gl.load(kv_scale_ptr)
    qk_scale = gl.convert_layout(factor, s_rows) * (SM_SCALE * _LOG2E * kv_scale)

    m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=s_rows)
    l_acc = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, layout=s_layout)
    s_init = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, layout=s_layout)
    o0 = gl.zeros([128, BLOCK_H], gl.float32, layout=o_layout)
    o1 = gl.zeros([128, BLOCK_H], gl.float32, layout=o_layout)
    o2 = gl.zeros([128, BLOCK_H], gl.float32, layout=o_layout)
    o3 = gl.zeros([128, BLOCK_H], gl.float32, layout=o_layout)
    s_cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))

    for n0 in range(first, end, BLOCK_N):
        b = (n0 - first) // BLOCK_N
        z = _opaque_zero(n0)
        # This block has landed (this thread's copies, then, past the barrier, every
        # thread's); every warp is past the last block's reads of its stage and of P,
        # so the block FP8_MMA_STAGES - 1 ahead may be copied there.
        async_copy.wait_group(FP8_MMA_STAGES - 2)
        gl.thread_barrier()
        ahead = n0 + (FP8_MMA_STAGES - 1) * BLOCK_N
        page = gl.load(bt_row + ahead // PAGE_SIZE, mask=ahead < end, other=0)
        refill = (b + FP8_MMA_STAGES - 1) % FP8_MMA_STAGES
        _fp8_mma_copy_block(
            kv8_smem.index(refill),
            pe8_smem.index(refill),
            kv_ptr,
            page,
            ahead,
            start,
            end,
            PAGE_SIZE,
            NUM_PAGES,
            LORA,
            ROPE,
            BLOCK_N,
            stride_kv_page,
            stride_kv_row,
        )
        async_copy.commit_group()
        fence_async_shared()  # cp.async wrote through the generic proxy; wgmma reads async
        kv8 = kv8_smem.index(b % FP8_MMA_STAGES)
        s = warpgroup_mma(
            q8_nope_smem.index(z), kv8.permute((1, 0)), s_init, use_acc=False, is_async=True
        )
        s = warpgroup_mma(
            q8_pe_smem.index(z),
            pe8_smem.index(b % FP8_MMA_STAGES).permute((1, 0)),
            s,
            is_async=True,
        )
        x = kv8.load(_VT_WORDS_LAYOUT)  # V's words, under the S MMAs
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
        # The row softmax; the exact max and P again only where the vote says a row
        # grew past the running max by more than the threshold. The row sum is of the
        # rounded P, the values the MMA multiplies.
        tokens = n0 + s_cols
        live = (tokens >= start) & (tokens < end)
        s = gl.where(live[None, :], s * qk_scale[:, None], float("-inf"))
        pt = p_smem.index(z)
        p = gl.exp2(s - m_i[:, None]).to(f8)
        pt.store(p)
        fence_async_shared()
        flags = (s - m_i[:, None] > RESCALE_THRESHOLD).to(gl.int32)
        if _cta_any(flags, n0, _THREAD_ANY_16) != 0:
            m_new = gl.maximum(m_i, gl.max(s, 1))
            grow = m_new - m_i > RESCALE_THRESHOLD
            alpha = gl.where(grow, gl.exp2(m_i - m_new), 1.0)
            m_i = gl.where(grow, m_new, m_i)
            p = gl.exp2(s - m_i[:, None]).to(f8)
            l_acc = l_acc * alpha[:, None] + p.to(gl.float32)
            alpha_o = gl.convert_layout(alpha, o_cols)[None, :]
            o0 = o0 * alpha_o
            o1 = o1 * alpha_o
            o2 = o2 * alpha_o
            o3 = o3 * alpha_o
            pt.store(p)
            fence_async_shared()
            gl.thread_barrier()
        else:
            l_acc = l_acc + p.to(gl.float32)
        # O^T += V^T P^T, V^T from registers, P^T the stored P seen K-major.
        a0, a1, a2, a3 = _vt_operands(x, a_layout)
        pt_t = pt.permute((1, 0))
        o0 = warpgroup_mma(a0, pt_t, o0, is_async=True)
        o1 = warpgroup_mma(a1, pt_t, o1, is_async=True)
        o2 = warpgroup_mma(a2, pt_t, o2, is_async=True)
        o3 = warpgroup_mma(a3, pt_t, o3, is_async=True)
        o0, o1, o2, o3 = warpgroup_mma_wait(num_outstanding=0, deps=(o0, o1, o2, o3))

    async_copy.wait_group(0)  # the phantom copies past the last block
    l_i = gl.sum(l_acc, 1)
    heads = tile * BLOCK_H + gl.arange(0, BLOCK_H, layout=s_rows)
    if out_ptr is None:
        dst_ptr = buf_ptr
        norm = kv_scale / l_i
        lse = (m_i + gl.log2(l_i)) * _LN2
        lse_off = (
            _head_rows(
                out_ptr,
                row,
                heads,
                split,
                NUM_HEADS,
                LORA,
                stride_buf_b,
                stride_buf_h,
                stride_buf_s,
            )
            + LORA
        )
        gl.store(buf_ptr + lse_off, lse, mask=heads < NUM_HEADS)
    else:
        dst_ptr = out_ptr
        norm, lse = _one_split_result(kv_scale / l_i, (m_i + gl.log2(l_i)) * _LN2, True)
        gl.store(lse_ptr + row * NUM_HEADS + heads, lse, mask=heads < NUM_HEADS)
    # O^T through the dead ring in the dims' order ([heads, dims]; a relabelling of the
    # tiles' registers), read back by rows: a warp's store then writes 32 consecutive
    # dims of a head (from the accumulators it would touch 8 dims of 4 heads).
    norm = gl.convert_layout(norm, o_cols)[None, :]
    x = gl.join(gl.join(o0 * norm, o1 * norm), gl.join(o2 * norm, o3 * norm))  # r, h, t
    x = gl.reshape(x, [8, 2, 8, BLOCK_H, 2, 2])  # w, i, q, h, t & 1, t >> 1
    x = gl.reshape(gl.permute(x, [3, 0, 2, 1, 5, 4]), [BLOCK_H, LORA])
    gl.thread_barrier()  # every warp past its last reads of the ring
    staged = kv8_smem._reinterpret(
        gl.float32, [BLOCK_H, LORA], gl.SwizzledSharedLayout(4, 1, 8, [1, 0])
    )
    staged.store(x)
    gl.thread_barrier()
    rows_layout: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [gl.num_warps(), 1], [1, 0])
    heads = tile * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, rows_layout))
    dims = gl.arange(0, LORA, layout=gl.SliceLayout(0, rows_layout))
    off = _head_rows(
        out_ptr, row, heads, split, NUM_HEADS, LORA, stride_buf_b, stride_buf_h, stride_buf_s
    )
    vals = staged.load(rows_layout).to(dst_ptr.dtype.element_ty)
    gl.store(dst_ptr + off[:, None] + dims[None, :], vals, mask=(heads < NUM_HEADS)[:, None])
