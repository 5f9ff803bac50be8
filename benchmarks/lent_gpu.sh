#!/usr/bin/env bash
# The real-CUDA checks, as one prepared run for a lent GPU machine (the `device` tool):
#
#   bash benchmarks/lent_gpu.sh OUT_DIR
#
# Such a machine is lent for minutes, bare, with its own Python and torch and nothing to fetch:
# this builds the C fast path for that Python, then runs each check with a time limit of its own
# (so one that hangs leaves the others' results) and writes each one's output to OUT_DIR:
#
# - cuda_memory.txt: the memory books against torch.cuda.memory_allocated() (benchmarks/cuda_memory.py)
# - real_cuda.txt/.json: each single-process CUDA script plain, under check on the GPU and under
#   --simulate cuda (benchmarks/real_cuda.py)
# - recall.txt: the bug corpus (tests/corpus) on the GPU: recall, false alarms, output and exit
#   unchanged (benchmarks/recall.py; its programs pick CUDA where there is one)
# - overhead_cuda.txt: the MLP step's overhead in wall time (benchmarks/overhead.py --device cuda)
#
# Time limits (seconds): REAL_CUDA_SECONDS (240), RECALL_SECONDS (200); RECALL_PROGRAMS names
# some programs of the corpus only. On the lent H200 each Python process starting CUDA takes
# seconds (14 at a time), so the two long checks may not end within a lease: both print each run
# as it ends (to the .txt), so a check cut short still tells what it ran. Each machine is bare:
# PYTHONPATH names this checkout (nothing is installed there).
set -u
out=${1:?usage: lent_gpu.sh OUT_DIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python=${PYTHON:-python3}
jobs=$(( $(nproc) > 4 ? $(nproc) - 2 : 2 ))

{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    $python -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name())'
    $python setup.py -q build_ext --inplace 2>&1 | tail -3
    $python -c 'from tensor_dap.agent import native; print("fast path:", native.fastpath is not None)'
} >"$out/setup.txt" 2>&1
cat "$out/setup.txt"

run() {  # run NAME SECONDS COMMAND...: one check, its output to OUT_DIR/NAME.txt
    local name=$1 seconds=$2
    shift 2
    local start=$SECONDS
    timeout "$seconds" "$@" >"$out/$name.txt" 2>&1
    echo "== $name: rc $? in $((SECONDS - start)) s" | tee -a "$out/$name.txt"
}

run cuda_memory 60 $python benchmarks/cuda_memory.py
run real_cuda "${REAL_CUDA_SECONDS:-240}" $python benchmarks/real_cuda.py -j "$jobs" --json "$out/real_cuda.json"
run overhead_cuda 90 $python benchmarks/overhead.py --device cuda --rounds 15
run recall "${RECALL_SECONDS:-200}" $python benchmarks/recall.py -v -j "$jobs" ${RECALL_PROGRAMS:-}
tail -n 4 "$out"/cuda_memory.txt "$out"/real_cuda.txt "$out"/recall.txt "$out"/overhead_cuda.txt
