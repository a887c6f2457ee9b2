#!/usr/bin/env bash
# One batched run on a GPU host without network access (see docs/benchmarks.md): installs hwadvisor without
# network (wheels carried in .whl/), runs the GPU tests, the probe, the trials and the
# benchmarks, and leaves everything under $OUT/res packed as $OUT/results.tgz.
# Usage: bash benchmarks/run_on_device.sh [tests|probe|startup|bench|multi|e2e|plan|stability|final|cluster]
set -u
mode=${1:-tests}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
res=${OUT:-/tmp/out}/res
mkdir -p "$res"
python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
if ! python3 -m pip install -q --no-deps --no-index --no-build-isolation . >"$res/pip.log" 2>&1; then
    echo "pip install of the project failed (see pip.log); using PYTHONPATH" | tee -a "$res/pip.log"
    export PYTHONPATH=/tmp/site:$PWD
fi
hw() { python3 -m hwadvisor "$@"; }
# Start-up is timed from /tmp so the installed package (with its bytecode) is what runs,
# not the source tree in the working directory.
startup() { (cd /tmp && timeout 240 python3 "$OLDPWD/benchmarks/probe_startup.py" --json "$res/$1.json" "${@:2}" 2>&1 | tail -6); }
# The image sets PYTHONDONTWRITEBYTECODE=1 and ships pynvml and psutil without bytecode, so each
# run compiles them from source. Time it as the image comes, then byte-compiled as pip leaves it.
startup_both() {
    echo "== start-up as the image comes"; startup probe_startup_image
    echo "== start-up byte-compiled, as a pip install leaves it"; startup probe_startup --bytecompile
}
date -u +%FT%TZ >"$res/date.txt"
nvidia-smi >"$res/nvidia-smi.txt" 2>&1
nvidia-smi topo -m >"$res/topo.txt" 2>&1
case "$mode" in
startup)
    # Where the probe's start-up goes on this host: imports, cProfile, then the benchmark.
    env | grep -i '^PYTHON' >"$res/python_env.txt"
    stats() { python3 -c 'import pstats,sys; pstats.Stats(sys.argv[1]).sort_stats(sys.argv[2]).print_stats(70)' "$@"; }
    (cd /tmp && python3 -m hwadvisor probe --json >"$res/probe.json" 2>"$res/probe.err"
     python3 -X importtime -m hwadvisor probe --json 2>"$res/importtime.txt" >/dev/null
     python3 -m cProfile -o "$res/probe.prof" -m hwadvisor probe --json >/dev/null 2>&1
     stats "$res/probe.prof" cumulative >"$res/cprofile.txt"
     TIMEFORMAT="probe %R s"; for i in 1 2 3; do time python3 -m hwadvisor probe --json >/dev/null 2>&1; done) 2>&1 | tee "$res/times.txt"
    startup_both
    ;;
multi)
    timeout 240 python3 -m pytest -q -p no:cacheprovider --continue-on-collection-errors -m "gpu or multigpu" -rs tests/trials/test_collectives.py tests/probe/test_nvidia_gpu.py 2>&1 | tee "$res/pytest_multi.log" | tail -8
    timeout 30 python3 -m hwadvisor probe --json --output "$res/probe_x2.json" >/dev/null
    timeout 120 python3 -m hwadvisor validate --trial collectives --json --output "$res/validate_collectives.json" >/dev/null 2>"$res/validate_collectives.err"
    timeout 150 python3 -m hwadvisor recommend --goal a --model llama-3-8b --phase training --gpus 2 --validate --json --output "$res/recommend_a_x2.json" >/dev/null 2>"$res/recommend_a_x2.err"
    ;;
tests)
    timeout 250 python3 -m pytest -q -p no:cacheprovider --continue-on-collection-errors --ignore=tests/report/test_schema.py -m gpu -rs 2>&1 | tee "$res/pytest_gpu.log" | tail -30
    timeout 30 python3 -m hwadvisor probe --json --output "$res/probe_h200.json" >/dev/null
    timeout 90 python3 -m hwadvisor probe --measure --json --output "$res/probe_measure_h200.json" >/dev/null 2>"$res/probe_measure.err"
    echo "probe --measure exit $?"
    startup_both
    (cd /tmp && timeout 150 python3 "$OLDPWD/benchmarks/recommend_scale.py" --no-matrix --bytecompile 2>&1 | tee "$res/recommend_scale.txt" | tail -8)
    ;;
probe)
    # The probe path on a real GPU: its GPU tests, probe and probe --measure, start-up (more rounds).
    timeout 200 python3 -m pytest -q -p no:cacheprovider -rs tests/probe/test_nvidia_gpu.py tests/cli/test_probe_command.py tests/probe/test_nvidia.py tests/probe/test_degrade.py tests/cli/test_startup.py tests/probe/test_detect.py tests/probe/test_presence.py 2>&1 | tee "$res/pytest_probe.log" | tail -6
    timeout 30 python3 -m hwadvisor probe --json --output "$res/probe_h200.json" >/dev/null 2>"$res/probe.err"; echo "probe exit $?"
    timeout 90 python3 -m hwadvisor probe --measure --json --output "$res/probe_measure_h200.json" >/dev/null 2>"$res/probe_measure.err"; echo "probe --measure exit $?"
    echo "== start-up byte-compiled"; startup probe_startup --bytecompile --runs 11
    ;;
bench)
    HWADVISOR_SUITE_REPORT="$res/validate_h200.json" timeout 240 python3 benchmarks/validate_h200.py --out "$res/validate_bench.json" 2>&1 | tee "$res/validate_bench.txt" | tail -30
    timeout 150 python3 -m hwadvisor recommend --goal b --model llama-3-8b --batch 1 --validate --json --output "$res/recommend_b_h200.json" >/dev/null 2>"$res/recommend_b.err"
    timeout 150 python3 -m hwadvisor recommend --goal c --model llama-3-70b --validate --json --output "$res/recommend_c_h200.json" >/dev/null 2>"$res/recommend_c.err"
    ;;
e2e)
    # Whole models in plain PyTorch + transformers (calibrates --engine hf), the GPU tests on
    # the current layout, and the validate suite's trials at the default workload.
    timeout 420 python3 benchmarks/e2e_torch.py --out "$res/e2e_torch.json" 2>&1 | grep -v -i warn | tee "$res/e2e_torch.txt" | tail -30
    timeout 200 python3 -m pytest -q -p no:cacheprovider --continue-on-collection-errors --ignore=tests/report/test_schema.py -m gpu -rs 2>&1 | tee "$res/pytest_gpu.log" | tail -6
    timeout 150 python3 -m hwadvisor validate --json --output "$res/validate.json" >/dev/null 2>"$res/validate.err"; echo "validate exit $?"
    ;;
plan)
    # The stacked-step trial and the model against the trials (GPU tests first), then the plan
    # validated as a whole for each goal on this GPU.
    timeout 240 python3 -m pytest -q -p no:cacheprovider --continue-on-collection-errors --ignore=tests/report/test_schema.py -m gpu -rs 2>&1 | tee "$res/pytest_gpu.log" | tail -12
    timeout 120 python3 benchmarks/trials_vs_model.py --run 2>&1 | tee "$res/trials_vs_model.txt" | tail -24
    rv() { name=$1; shift; timeout 150 python3 -m hwadvisor recommend "$@" --validate --json --output "$res/$name.json" >/dev/null 2>"$res/$name.err"; echo "$name exit $?"; }
    rv recommend_b_8b_b1 --goal b --model llama-3-8b --batch 1
    rv recommend_a_1b_hf --goal a --model llama-3.2-1b --phase training --batch 4 --engine hf
    rv recommend_c_8b_b16 --goal c --model llama-3-8b --batch 16
    ;;
stability)
    # Verdicts three times at batch 1, 4 and 16, and the validate suite from a fresh process.
    timeout 420 python3 benchmarks/validate_stability.py --out "$res/stability" 2>&1 | tee "$res/stability.txt" | tail -60
    ;;
cluster)
    # Job-wide runs under torchrun on this host's GPUs (docs/cluster.md), against the
    # collectives trial's own launcher: the same bus bandwidth within ±5% is the target.
    n=$(nvidia-smi -L | grep -c '^GPU')
    job="python3 -m torch.distributed.run --standalone --nproc-per-node $n -m hwadvisor"
    timeout 300 python3 -m pytest -q -p no:cacheprovider -m "gpu or multigpu" -rs tests/cluster/test_job.py 2>&1 | tee "$res/pytest_cluster.log" | tail -8
    timeout 150 python3 -m hwadvisor validate --trial collectives --json --output "$res/collectives_own.json" >/dev/null 2>"$res/collectives_own.err"
    timeout 200 $job validate --trial collectives --json --output "$res/collectives_torchrun.json" >/dev/null 2>"$res/collectives_torchrun.err"
    timeout 200 $job probe --measure --json --output "$res/probe_measure_torchrun.json" >/dev/null 2>"$res/probe_measure_torchrun.err"
    python3 benchmarks/cluster_compare.py "$res/collectives_own.json" "$res/collectives_torchrun.json" --out "$res/cluster_compare.json" 2>&1 | tee "$res/cluster_compare.txt"
    ;;
final)
    # Everything once more on a two-GPU machine: GPU 0 serves the single-GPU work.
    timeout 300 python3 -m pytest -q -p no:cacheprovider --continue-on-collection-errors --ignore=tests/report/test_schema.py -m "gpu or multigpu" -rs 2>&1 | tee "$res/pytest_gpu.log" | tail -12
    timeout 30 python3 -m hwadvisor probe --json --output "$res/probe.json" >/dev/null
    timeout 90 python3 -m hwadvisor probe --measure --json --output "$res/probe_measure.json" >/dev/null 2>"$res/probe_measure.err"
    HWADVISOR_SUITE_REPORT="$res/validate_suite.json" timeout 240 python3 benchmarks/validate_h200.py --out "$res/validate_bench.json" 2>&1 | tee "$res/validate_bench.txt" | tail -24
    timeout 150 python3 -m hwadvisor recommend --goal b --model llama-3-8b --batch 1 --gpus 1 --validate --json --output "$res/recommend_b.json" >/dev/null 2>"$res/recommend_b.err"
    timeout 150 python3 -m hwadvisor recommend --goal a --model llama-3.2-1b --phase training --gpus 2 --validate --json --output "$res/recommend_a_x2.json" >/dev/null 2>"$res/recommend_a_x2.err"
    startup_both
    ;;
esac
tar -czf "${OUT:-/tmp/out}/results.tgz" -C "$res/.." res
ls -la "$res"
