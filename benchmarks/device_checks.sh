#!/usr/bin/env bash
# The checks to run where a GPU is lent (the device tool), in one command from the repository root:
#   bash benchmarks/device_checks.sh            # logs in $OUT (the device tool's folder), else ./device-logs
# 1. tests/test_cuda.py on CUDA; 2. bench_gpu.py's 1,000,000 x 128 cell (both strategies, max_length 2 and 3,
# beside the CPU with all threads and LightGBM); 3. bench_stream.py with batches and codes on the GPU
# (20,000,000 x 128 streamed, 2,000,000 x 128 in memory); 4. bench_gpu.py's grid on the GPU alone (default strategy).
# Packages the device lacks travel as wheels in .whl/ (see the device tool's README). Each step has its own time
# limit, so that one slow step leaves the others' logs.
set -u
out=${OUT:-device-logs}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-}
threads=$(nproc)
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; date -u; echo "$threads CPU threads";
  python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"; } 2>&1 | tee "$out/gpu.txt"
timeout "${T_TESTS:-150}" python3 -m pytest tests/test_cuda.py --device cuda -q -rs -p no:cacheprovider 2>&1 \
    | tee "$out/test_cuda.log" | tail -30
timeout "${T_CELL:-120}" python3 benchmarks/bench_gpu.py --n 1000000 --f 128 --lengths 2 3 --cpu all \
    --threads "$threads" 2>&1 | tee "$out/bench_gpu_1m.md"
timeout "${T_STREAM:-150}" python3 benchmarks/bench_stream.py --device cuda 2>&1 | tee "$out/bench_stream.log"
timeout "${T_GRID:-120}" python3 benchmarks/bench_gpu.py --strategies beam --cpu --no-lgbm 2>&1 \
    | tee "$out/bench_gpu_grid.md"
