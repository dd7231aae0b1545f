#!/usr/bin/env bash
# Run from the repo root on main: snapshots for the next device calls.
#   build/snap: main (the current kernels); build/tma: wip/global-scratch (TMA seesaw);
#   build/count: main's mla_jax with wip/seesaw-one-split-count's _gluon_kernels.py.
set -e
rm -rf build/snap build/tma build/count && mkdir -p build/snap build/tma build/count
git ls-files -co --exclude-standard | tar -T - -cf - | tar -x -C build/snap
cp -r .vllm build/snap/ && git rev-parse --short HEAD > build/snap/REV
git archive wip/global-scratch mla_jax tests scripts pyproject.toml | tar -x -C build/tma
git rev-parse --short wip/global-scratch > build/tma/REV
cp -r build/snap/mla_jax build/count/
git show wip/seesaw-one-split-count:mla_jax/_gluon_kernels.py > build/count/mla_jax/_gluon_kernels.py
git rev-parse --short wip/seesaw-one-split-count > build/count/REV
cp build/next/common.sh build/next/run*.sh build/
du -sh build
