#!/usr/bin/env bash
# Every check that needs a GPU, in one run, in the order a short lease should spend its time: the machine, the CUDA
# tests, the original study's BSDS300 grid with where its time goes, the native solver's cost against torchdiffeq at the nine sizes,
# and a (shortened) GPU training. Each step has a time limit of its own and writes under OUT; one that fails or runs
# out of time is said in steps.txt and the next one runs.
#
#   bash bench/gpu_checks.sh OUT [TRAIN_ITERS]
#
# TRAIN_ITERS (default 50): iterations of configs/cnf_2spirals_train_gpu.toml per setup (the config's own is 2000).
set -u
out=${1:?usage: bench/gpu_checks.sh OUT [TRAIN_ITERS]}
iters=${2:-50}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3}

step() {  # step NAME SECONDS COMMAND...: its output in NAME.log, its exit status and wall time in steps.txt
    local name=$1 limit=$2 start=$SECONDS
    shift 2
    timeout --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1
    local status=$?
    echo "$name: exit $status in $((SECONDS - start)) s (limit $limit s)" | tee -a "$out/steps.txt"
}

{
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
    $py -c 'import torch, torchdiffeq; print("torch", torch.__version__, "cuda", torch.version.cuda, "torchdiffeq",
torchdiffeq.__version__); print(torch.cuda.get_device_name(), "capability", torch.cuda.get_device_capability(),
"tf32 matmul", torch.backends.cuda.matmul.allow_tf32, "cudnn", torch.backends.cudnn.allow_tf32)'
    nproc
} >"$out/machine.txt" 2>&1

step cuda_tests 100 $py -m pytest -q -m cuda -p no:cacheprovider --continue-on-collection-errors tests
step seed_grid 200 $py bench/sweep_overhead.py --config configs/otflow_bsds300.toml --out "$out/seed-grid"
step native_cost 100 $py bench/native_cost.py --device cuda --time-all --markdown "$out/native_cost.md"
step training 90 $py -m roundoff_cli train --config configs/cnf_2spirals_train_gpu.toml --iters "$iters" \
    --save-at "0,$((iters / 2)),$iters" --out "$out/cnf-train-gpu"
