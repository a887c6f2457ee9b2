#!/usr/bin/env bash
# Where llama.cpp's prefill time goes on a GPU host (docs/benchmarks.md "llama.cpp prefill"):
# builds and writes the model files through run.sh (no benchmark step), then times pp with
# llama-bench across ubatch sizes (a fixed cost per forward shrinks per token as the ubatch
# grows; a per-token cost does not), with and without CUDA graphs, and lists nsys's kernel
# summary of one 1B F16 pp512 run where the host has nsys.
# Usage: bash prefill_sweep.sh STAGE   results: $OUT/res
set -u
stage=$(cd "$1" && pwd)
PRESETS=${PRESETS:-llama-3.2-1b llama-3-8b} BUDGET_S=330 bash "$stage/code/benchmarks/llamacpp/run.sh" "$stage" none
bin=/tmp/llc/build/bin m=/tmp/llc/models res=${OUT:-/tmp/out}/res
files=(); for p in ${PRESETS:-llama-3.2-1b llama-3-8b}; do files+=("$m/$p-f16.gguf" "$m/$p-q4_k_m.gguf"); done
args=$(printf -- '-m %s ' "${files[@]}")
timeout 120 "$bin/llama-bench" $args -p 512,2048 -n 0 -ub 128,512,2048 -b 2048 -ngl 99 -r 2 -o json \
    >"$res/pp_ubatch.json" 2>"$res/pp_ubatch.err"; echo "ubatch sweep rc=$?"
GGML_CUDA_DISABLE_GRAPHS=1 timeout 45 "$bin/llama-bench" $args -p 512 -n 0 -ngl 99 -r 3 -o json \
    >"$res/pp_nographs.json" 2>"$res/pp_nographs.err"; echo "no graphs rc=$?"
if command -v nsys >/dev/null; then
    timeout 50 nsys profile -o /tmp/pp1b --force-overwrite true "$bin/llama-bench" -m "${files[0]}" -p 512 -n 0 -ngl 99 -r 3 \
        >/dev/null 2>&1; timeout 40 nsys stats --report cuda_gpu_kern_sum,cuda_api_sum /tmp/pp1b.nsys-rep >"$res/nsys_1b_f16_pp512.txt" 2>&1
    echo "nsys rc=$?"
else
    echo "no nsys" | tee "$res/nsys_1b_f16_pp512.txt"
fi
