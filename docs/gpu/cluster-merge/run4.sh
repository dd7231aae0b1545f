#!/bin/bash
# One device call: what the cluster costs by itself. barrier-only.patch on a copy of
# the tree: with cluster_merge the seesaw is launched as clusters of two CTAs that
# store their partials as without, meet at the cluster barrier (MLA_BARRIER=1) or
# not (0), and stage 2 merges; ab_cluster.py against the plain launch. Logs to $OUT.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
cat build/REV > "$OUT/rev4.txt"
rm -rf /tmp/v && mkdir /tmp/v && cp -r mla_jax docs /tmp/v/ && (cd /tmp/v && patch -s -p1 < docs/gpu/cluster-merge/barrier-only.patch)
t0=$(date +%s)
for b in 1 0; do
  MLA_BARRIER=$b TRITON_CACHE_DIR=/tmp/tc$b PYTHONPATH=/tmp/v timeout 170 python /tmp/v/docs/gpu/cluster-merge/ab_cluster.py \
    64/64/1024 64/32/1024 32/128/1024 64/64/4096 > "$OUT/ab-cluster-only-barrier$b.log" 2>&1
  echo "rc=$? $(( $(date +%s) - t0 )) s" >> "$OUT/ab-cluster-only-barrier$b.log"
done
