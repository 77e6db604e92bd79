#!/usr/bin/env bash
# The GPU checks (issue 8) as one script, for a machine with NVIDIA GPUs and a CUDA build of torch:
#
#     bash tools/gpu_check.sh            # results in $OUT (the device tool sets it) or test-output/gpu
#     bash tools/gpu_check.sh --dry-run  # the same steps on CPU at smoke sizes, with tests/fake_cuda.py standing
#                                        # in for 2 GPUs (NCCL is Gloo underneath): CI runs this
#                                        # (tests/test_gpu_check.py), so a lent GPU never meets a broken script
#
# On a lent device machine (Python 3.12 with torch, no network, no Jupyter): run tools/fetch_gpu_wheels.sh
# here first and carry .whl; this script installs those wheels into /tmp/site. Steps, each with a timeout,
# each run even if an earlier one failed; the summary at the end gives each step's exit status:
#   1. tests/test_gpu.py: the NCCL path on 1 GPU, and on 2 where there are 2
#   2. python -m commlib bench on NCCL: all_reduce built-in and commlib's ring (busbw as nccl-tests)
#   3. benchmarks/ddp_overlap.py on CUDA: BucketedDDP vs torch DDP vs no overlap
#   4. nbval of every notebook: they must run unchanged on a GPU machine (with fewer GPUs than a notebook's
#      ranks, its cluster uses Gloo); the dry run only collects them (CI runs them all anyway), and step 1's
#      tests too (tests/test_gpu_path.py runs their CUDA branches on the fake)
# Exit status: 0 when every step exited 0, else 1 (the summary says which); 2 for a bad argument.
set -uo pipefail
cd "$(dirname "$0")/.."
DRY=0
case "${1:-}" in
    --dry-run) DRY=1 ;;
    "") ;;
    *) echo "usage: bash tools/gpu_check.sh [--dry-run], got: $*" >&2; exit 2 ;;
esac
OUT="${OUT:-test-output/gpu}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1
if (( ! DRY )) && compgen -G ".whl/*.whl" >/dev/null; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || echo "wheel install failed" >&2
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
# commlib from this tree; torch < 2.13 gets 2.13's names for two collectives (tools/gpu_compat)
export PYTHONPATH="$PWD:$PWD/tools/gpu_compat${PYTHONPATH:+:$PYTHONPATH}"
if (( DRY )); then
    # the fake's sitecustomize goes first (it shadows gpu_compat's, which torch 2.13 does not need); every
    # Python started below, the ranks of each Cluster included, installs the fake
    export COMMLIB_FAKE_CUDA="${COMMLIB_FAKE_CUDA:-2}" PYTHONPATH="$PWD/tests/fake_cuda_site:$PYTHONPATH"
    # tests/test_gpu.py only collected (imports, fixtures, parameters): tests/test_gpu_path.py runs the CUDA
    # branches its tests reach, on the fake with values, and CI runs them once
    TEST_ARGS=(--collect-only)
    BENCH_SIZES=(--min-bytes 8K --max-bytes 32K --factor 4 --iters 2 --warmup 1)
    DDP_SIZES=(--layers 2 --width 64 --batch 16 --steps 3 --rounds 1)
    NOTEBOOK_ARGS=(--collect-only)
    { echo "dry run: no GPU; tests/fake_cuda.py stands in for $COMMLIB_FAKE_CUDA GPUs, NCCL is Gloo underneath"
      $PY -c "import sys, torch; print(sys.version.split()[0], 'torch', torch.__version__, 'gpus', torch.cuda.device_count())"
    } 2>&1 | tee "$OUT/machine.txt"
else
    TEST_ARGS=()
    BENCH_SIZES=(--min-bytes 8K --max-bytes 256M --factor 4 --iters 20 --warmup 5)
    DDP_SIZES=(--layers 8 --width 4096 --batch 1024 --steps 20 --rounds 3)
    NOTEBOOK_ARGS=()
    { nvidia-smi -L; $PY -c "import sys, torch, torch.distributed as d; print(sys.version.split()[0], 'torch', torch.__version__,
'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count(), 'nccl', d.is_nccl_available() and torch.cuda.nccl.version())"
    } 2>&1 | tee "$OUT/machine.txt"
fi
if (( DRY )); then GPUS=$COMMLIB_FAKE_CUDA; else
    GPUS=$($PY -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
fi
P=$(( GPUS >= 2 ? 2 : 1 ))
declare -A STATUS SECS

BUDGET="${GPU_CHECK_BUDGET_S:-540}"  # the whole script, in seconds (a device call may run 600)
step() {  # step NAME SECONDS command...: at most SECONDS and never past the budget; output to $OUT/NAME.txt
    local name=$1 limit=$2; shift 2
    local left=$(( BUDGET - SECONDS - 10 ))
    (( limit > left )) && limit=$left
    if (( limit < 30 )); then STATUS[$name]="skipped (budget spent)"; return; fi
    echo "== $name (at most ${limit} s): $*"
    local t0=$SECONDS
    timeout --kill-after=5 "$limit" "$@" 2>&1 | tee "$OUT/$name.txt"
    STATUS[$name]=${PIPESTATUS[0]} SECS[$name]=$(( SECONDS - t0 ))
}

step test_gpu 200 $PY -m pytest -q -rs -p no:cacheprovider tests/test_gpu.py "${TEST_ARGS[@]}"
step bench_builtin 60 $PY -m commlib bench --world-size "$P" --backend nccl --op all_reduce --algorithm builtin \
    "${BENCH_SIZES[@]}"
step bench_ring 60 $PY -m commlib bench --world-size "$P" --backend nccl --op all_reduce --algorithm ring \
    "${BENCH_SIZES[@]}"
step ddp_overlap 90 $PY benchmarks/ddp_overlap.py --world-size "$P" --backend nccl "${DDP_SIZES[@]}"
step notebooks 400 $PY -m pytest -q -p no:cacheprovider --nbval-cell-timeout=120 notebooks/ "${NOTEBOOK_ARGS[@]}"

echo "== summary (exit status per step; 124: timed out)" | tee "$OUT/summary.txt"
failed=0
for name in test_gpu bench_builtin bench_ring ddp_overlap notebooks; do
    echo "$name: ${STATUS[$name]:-not run}${SECS[$name]:+ (${SECS[$name]} s)}" | tee -a "$OUT/summary.txt"
    [ "${STATUS[$name]:-}" = 0 ] || failed=1
done
exit "$failed"
