#!/usr/bin/env bash
# The grid of the CI regression check, written in this one place: used by .ci/run, and to
# regenerate reports/baselines/otflow-ci (docs/ci.md, "This project's CI").
# A tiny OT-Flow (d=3, hidden 8, batch 16) over the default grid's seven (library, dtype, scaling) triples,
# euler and rk4, n_timesteps 4 and 16: 28 configurations, seconds on one CPU core.
# Usage: .ci/baseline_sweep.sh OUT [more `roundoff sweep` options]
set -euo pipefail
out=${1:?usage: .ci/baseline_sweep.sh OUT [roundoff sweep options]}
shift
# One thread: on a problem this small, threads only add contention (a loaded 2-core machine took
# 68 s with two threads, 6 s with one); the errors were identical with 1 and 2 threads.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# No timing pass: the check compares errors only.
exec roundoff sweep --model otflow -o d=3 -o hidden=8 -o batch=16 --timesteps 4,16 --device cpu --no-report --no-timing \
    --out "$out" "$@"
