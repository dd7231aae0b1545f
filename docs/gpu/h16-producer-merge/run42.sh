#!/usr/bin/env bash
# wip/merge-stage1: the tl stage 1 merging its own splits against stage 1 + stage 2
# (merge_ab.py, CUDA graphs, H=16/32 shapes where the tl kernel runs).
source "$(dirname "$0")/common.sh"
M="$PWD/../mg"
(cd $M; echo "rev $(cat REV)"; PYTHONPATH="$M:$M/scripts" timeout 200 python3 ../merge_ab.py 2>&1) > $OUT/merge-ab.log; cat $OUT/merge-ab.log
echo "done $(( $(date +%s) - t0 )) s"
