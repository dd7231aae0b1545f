#!/bin/bash
# One device call (about 450 s) on the tree that routes a 16-bit cache at 16 heads to
# mla_decode_stage1_gluon_h16 at half the occupancy rule's splits: 1) ab.py, the
# kernel against the tl stage 1 at both counts (CUDA graphs); 2) the sweep's 17 H=16
# rows through `mla_jax bench` beside vLLM (one part, the sweep's settings); 3)
# 64/16/4096 alone in two more bench processes; 4) gluon_check.py --skip-timing
# (16-bit caches now at 16, 64 and 128 heads, fp8 as before). Logs to $OUT.
source docs/gpu/sweep-c11b1c4/common.sh  # the environment and `part`
(echo "rev $rev"; timeout 150 python3 docs/gpu/h16-bf16/ab.py 2>&1) > $OUT/ab.log
echo "ab $(( $(date +%s) - t0 )) s"
part h16 170 150 --batch 1,4,16,64,128 --heads 16 --paths $P
for i in 1 2; do
  part 64-16-4096-$i 60 40 --batch 64 --heads 16 --lens 4096 --paths $P
done
(echo "rev $rev"; TRITON_CACHE_DIR=/tmp/tc2 timeout 300 python3 scripts/gluon_check.py --skip-timing 2>&1;
 echo "rc=$?") > $OUT/check.log
tail -n 2 $OUT/check.log; grep -c PASS $OUT/check.log; grep FAIL $OUT/check.log | head
echo "done $(( $(date +%s) - t0 )) s"
