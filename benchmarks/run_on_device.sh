#!/usr/bin/env bash
# One batched run on a lent GPU machine (see docs/benchmarks.md): installs hwadvisor without
# network (wheels carried in .whl/), runs the GPU tests, the probe, the trials and the
# benchmarks, and leaves everything under $OUT/res packed as $OUT/results.tgz.
# Usage: bash benchmarks/run_on_device.sh [single|multi]
set -u
mode=${1:-single}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
res=${OUT:-/tmp/out}/res
mkdir -p "$res"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
if ! python3 -m pip install -q --no-deps --no-index --no-build-isolation . >"$res/pip.log" 2>&1; then
    echo "pip install of the project failed (see pip.log); using PYTHONPATH" | tee -a "$res/pip.log"
    export PYTHONPATH=/tmp/site:$PWD
fi
hw() { python3 -m hwadvisor "$@"; }
date -u +%FT%TZ >"$res/date.txt"
nvidia-smi >"$res/nvidia-smi.txt" 2>&1
nvidia-smi topo -m >"$res/topo.txt" 2>&1
if [ "$mode" = multi ]; then
    timeout 300 python3 -m pytest -q -p no:cacheprovider -m "gpu or multigpu" tests/test_collectives.py tests/test_gpu_probe.py 2>&1 | tee "$res/pytest_multi.log" | tail -5
    hw probe --json --output "$res/probe_x2.json" >/dev/null
    hw validate --trial collectives --json --output "$res/validate_collectives.json" >/dev/null
    hw recommend --goal a --model llama-3-8b --phase training --gpus 2 --validate --json --output "$res/recommend_a_x2.json" >/dev/null
else
    timeout 420 python3 -m pytest -q -p no:cacheprovider -m gpu 2>&1 | tee "$res/pytest_gpu.log" | tail -15
    hw probe --json --output "$res/probe_h200.json" >/dev/null
    hw probe --measure --json --output "$res/probe_measure_h200.json" >/dev/null
    /usr/bin/time -v python3 -m hwadvisor validate --json --output "$res/validate_h200.json" >/dev/null 2>"$res/validate_time.txt"
    python3 benchmarks/validate_h200.py --out "$res/validate_bench.json" 2>&1 | tee "$res/validate_bench.txt" | tail -20
    hw recommend --goal b --model llama-3-8b --batch 1 --validate --json --output "$res/recommend_b_h200.json" >/dev/null
    hw recommend --goal a --model llama-3-8b --phase training --validate --json --output "$res/recommend_a_h200.json" >/dev/null
    hw recommend --goal c --model llama-3-70b --validate --json --output "$res/recommend_c_h200.json" >/dev/null
    python3 benchmarks/probe_startup.py --json "$res/probe_startup.json" 2>&1 | tail -4
fi
tar -czf "${OUT:-/tmp/out}/results.tgz" -C "$res/.." res
ls -la "$res"
