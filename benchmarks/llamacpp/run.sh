#!/usr/bin/env bash
# llama.cpp on a GPU host without network (docs/benchmarks.md "llama.cpp on the H200"): build the
# pinned source with CUDA, write random-weight GGUF files of two presets' shapes, quantise them
# with llama-quantize, then time them with llama-bench, llama-batched-bench and llama-server
# started with the flags hwadvisor emits. Everything needed travels in one folder (STAGE):
# code/ (hwadvisor and these scripts), the llama.cpp source tarball, whl/ (pydantic and friends).
# Steps already done on a still-warm machine (the build, the model files) are skipped.
# Usage: bash run.sh STAGE [all|bench|serve|slots|loop|batched ...]   results: $OUT/res, packed as $OUT/llamacpp.tgz
# PRESETS="llama-3.2-3b" times other presets' shapes (default: llama-3.2-1b llama-3-8b); the
# server runs use the first preset's Q4_K_M file.
set -u
stage=$(cd "$1" && pwd); shift
steps=${*:-all}
t_start=$SECONDS
budget=${BUDGET_S:-560}
left() { echo $(( budget - (SECONDS - t_start) )); }
want() { [[ " $steps " == *" all "* || " $steps " == *" $1 "* ]]; }
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=/usr/local/cuda/bin:$PATH
res=${OUT:-/tmp/out}/res; mkdir -p "$res"
work=/tmp/llc; mkdir -p "$work/models"
bin=$work/build/bin; m=$work/models
log() { echo "[$(( SECONDS - t_start ))s] $*" | tee -a "$res/steps.log"; }

{ date -u +%FT%TZ; nvidia-smi; nvcc --version; nproc; free -g; df -h /tmp; } >"$res/env.txt" 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$stage"/whl/pydantic*.whl "$stage"/whl/annotated_types*.whl "$stage"/whl/typing_inspection*.whl >>"$res/steps.log" 2>&1
command -v cmake >/dev/null && command -v ninja >/dev/null || {
    python3 -m pip install -q --no-index --no-deps --target /tmp/tools "$stage"/whl/cmake*.whl "$stage"/whl/ninja*.whl
    export PATH=/tmp/tools/bin:$PATH; }
export PYTHONPATH=/tmp/site:$stage/code
[ -d "$work/llama.cpp" ] || tar -xzf "$stage"/llama.cpp-*.tgz -C "$work"
gguf_py=$work/llama.cpp/gguf-py
presets=$stage/code/hwadvisor/workload/presets

PRESETS=${PRESETS:-llama-3.2-1b llama-3-8b}
first=${PRESETS%% *}
# hwadvisor's emitted flags (in the background while the build runs)
cases=${SERVE_CASES:-"1:512:128 8:512:128 64:512:128 1:2048:256 8:2048:256 64:2048:256"}
(cd "$stage/code" && python3 benchmarks/llamacpp/plan_flags.py "$res/flags_1b_q4.json" "$first" q4_k_m $cases \
    >"$res/flags.txt" 2>&1) &
# model files (in the background: mostly disk writes)
(for p in $PRESETS; do
    shape=$presets/$p.json  # shapes/: a preset as the llama-architecture file runs it (no window)
    [ -f "$stage/code/benchmarks/llamacpp/shapes/$p.json" ] && shape=$stage/code/benchmarks/llamacpp/shapes/$p.json
    [ -s "$m/$p-f16.gguf" ] || PYTHONPATH=$gguf_py python3 "$stage/code/benchmarks/llamacpp/make_gguf.py" \
        "$shape" "$m/$p-f16.gguf.tmp" && mv -f "$m/$p-f16.gguf.tmp" "$m/$p-f16.gguf" 2>/dev/null
done >"$res/gguf.log" 2>&1) &
gguf_pid=$!

# A build carried from an earlier run (STAGE/llamacpp-bin.tar.xz.*, written by PACK_BIN=1 below)
# saves the ~4.5-minute build; it runs from the same path, where its RPATH points.
if [ ! -x "$bin/llama-server" ] && compgen -G "$stage/llamacpp-bin.tar.xz.*" >/dev/null; then
    mkdir -p "$work/build" && cat "$stage"/llamacpp-bin.tar.xz.* | tar -xJ -C "$work/build" && log "carried build unpacked"
fi
if [ ! -x "$bin/llama-server" ]; then
    log "build start"
    timeout $(( $(left) - 60 )) bash "$stage/code/benchmarks/llamacpp/build.sh" "$work/llama.cpp" "$work/build" \
        >"$work/build.log" 2>&1; rc=$?
    tail -30 "$work/build.log" >"$res/build_tail.txt"; log "build rc=$rc"
    [ -x "$bin/llama-server" ] || { log "no build"; tar -czf "${OUT:-/tmp/out}/llamacpp.tgz" -C "$res/.." res; exit 1; }
fi
if [ -n "${PACK_BIN:-}" ]; then  # the build, for the next run's STAGE (in parts under the 16 MiB a file)
    (cd "$work/build" && tar -cf - bin | xz -T0 -6 | split -b 15M - "${OUT:-/tmp/out}/llamacpp-bin.tar.xz.";
     log "build packed: $(ls -la ${OUT:-/tmp/out} | grep -c bin.tar)") &
fi
wait $gguf_pid; log "gguf done: $(ls -la $m | tr '\n' ';')"
for p in $PRESETS; do
    [ -s "$m/$p-q4_k_m.gguf" ] || { timeout 200 "$bin/llama-quantize" "$m/$p-f16.gguf" "$m/$p-q4_k_m.gguf.tmp" Q4_K_M 16 \
        >"$res/quantize_$p.log" 2>&1 && mv -f "$m/$p-q4_k_m.gguf.tmp" "$m/$p-q4_k_m.gguf"; tail -5 "$res/quantize_$p.log" | tee -a "$res/steps.log"; }
done
log "quantize done: $(ls -la $m | tr '\n' ';')"
M1Q=$m/$first-q4_k_m.gguf
files=(); for p in $PRESETS; do files+=("$m/$p-q4_k_m.gguf" "$m/$p-f16.gguf"); done

if want bench && [ "$(left)" -gt 120 ]; then
    log "llama-bench"
    timeout $(( $(left) - 60 )) "$bin/llama-bench" $(printf -- '-m %s ' "${files[@]}") -p 512 -n 128 -ngl 99 -r 5 -o json \
        >"$res/llama_bench.json" 2>"$res/llama_bench.err"; log "llama-bench rc=$?"
fi
if want serve && [ "$(left)" -gt 90 ]; then
    log "server runs"
    python3 - "$res/flags_1b_q4.json" >"$res/serve_cases.txt" <<'PY'
import json, sys
for i, r in enumerate(json.load(open(sys.argv[1]))):
    print(r["batch"], r["prompt_len"], r["gen_len"], r["flags"], sep="\t")
PY
    port=18080
    while IFS=$'\t' read -r b p g flags; do
        [ "$(left)" -gt 60 ] || break
        port=$((port + 1))
        timeout 150 python3 "$stage/code/benchmarks/llamacpp/serve_bench.py" --server "$bin/llama-server" --model "$M1Q" \
            --batch "$b" --prompt-len "$p" --gen-len "$g" --flags "$flags" --port $port \
            --out "$res/serve/emitted_b${b}_p${p}.json" 2>&1 | tee -a "$res/steps.log"
    done < <(mkdir -p "$res/serve"; cat "$res/serve_cases.txt")
    # The same batch with the context each request needs in every slot (--ctx-size B x (P+G)),
    # without the drafter: what the emitted line should have been, for timings where it failed.
    for c in ${SIZED_CASES-64:2048:256 8:512:128 1:512:128}; do
        IFS=: read -r b p g <<<"$c"; [ "$(left)" -gt 60 ] || break; port=$((port + 1))
        timeout 150 python3 "$stage/code/benchmarks/llamacpp/serve_bench.py" --server "$bin/llama-server" --model "$M1Q" \
            --batch "$b" --prompt-len "$p" --gen-len "$g" --port $port \
            --flags "--parallel $b --ctx-size $(( b * (p + g) )) --n-gpu-layers 999" \
            --out "$res/serve/sized_b${b}_p${p}.json" 2>&1 | tee -a "$res/steps.log"
    done
fi
if want slots && [ "$(left)" -gt 90 ]; then
    # llama-server's per-slot host work: every preset's Q4_K_M file at 8 and 64 slots (512 + 128),
    # the context each request needs, with and without --backend-sampling (sampling on the GPU)
    port=18200; mkdir -p "$res/serve"
    for p in $PRESETS; do
        shape=$presets/$p.json; [ -f "$stage/code/benchmarks/llamacpp/shapes/$p.json" ] && shape=$stage/code/benchmarks/llamacpp/shapes/$p.json
        vocab=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$shape")
        for b in 8 64; do
            for extra in "" "--backend-sampling"; do
                [ "$(left)" -gt 60 ] || break 3; port=$((port + 1)); tag=${extra:+_bs}
                timeout 120 python3 "$stage/code/benchmarks/llamacpp/serve_bench.py" --server "$bin/llama-server" \
                    --model "$m/$p-q4_k_m.gguf" --batch $b --prompt-len 512 --gen-len 128 --port $port --vocab "$vocab" \
                    --flags "--parallel $b --ctx-size $(( b * 768 )) --n-gpu-layers 999 $extra" \
                    --out "$res/serve/slots_${p}_b${b}${tag}.json" 2>&1 | tail -2 | tee -a "$res/steps.log"
            done
        done
    done
fi
if want loop; then
    # The engine in the loop as a user runs it: recommend --validate --engine-model FILE, with the
    # build's tools on PATH, on the probed GPU. LOOP_CASES: batch:prompt:gen (default batch 1 and 64).
    mkdir -p "$res/loop"
    for mf in "${files[@]}"; do
        name=$(basename "$mf" .gguf); model=${name%-*}; w=${name##*-}; [ "$w" = f16 ] && wd=fp16 || wd=$w
        shape=$model; [ -f "$stage/code/benchmarks/llamacpp/shapes/$model.json" ] && shape=$stage/code/benchmarks/llamacpp/shapes/$model.json
        for c in ${LOOP_CASES:-1:512:128 64:512:128}; do
            IFS=: read -r b p g <<<"$c"; [ "$(left)" -gt 100 ] || break 2
            PATH=$bin:$PATH timeout 240 python3 -m hwadvisor recommend --goal inference-latency --engine llamacpp \
                --model "$shape" --weights-dtype "$wd" --batch "$b" --prompt-len "$p" --gen-len "$g" \
                --validate --engine-model "$mf" --json --output "$res/loop/${name}_b${b}_p${p}.json" \
                >/dev/null 2>"$res/loop/${name}_b${b}_p${p}.err"
            log "loop $name b$b p$p rc=$?"
        done
    done
fi
if want batched; then
    for mf in "${files[@]}"; do
        for pg in 512:128 2048:256; do
            IFS=: read -r p g <<<"$pg"; [ "$(left)" -gt 45 ] || break 2
            name=$(basename "$mf" .gguf)_p$p
            # every batch twice: the first pass is cold (llama-batched-bench warms up on 16 tokens),
            # compare.py reads the second (parse_batched_bench drops a batch's first row)
            timeout $(( $(left) - 30 )) "$bin/llama-batched-bench" -m "$mf" -c $(( 64 * (p + g) + 256 )) -b 2048 -ub 512 \
                -npp $p -ntg $g -npl 1,8,64,1,8,64 -ngl 99 --output-format md >"$res/batched_$name.txt" 2>"$work/batched_$name.err"
            log "batched $name rc=$? $(grep -c '^| *[0-9]' "$res/batched_$name.txt")"
        done
    done
fi
wait; log "end"
(cd "$res/.." && tar -czf "${OUT:-/tmp/out}/llamacpp.tgz" res)
grep -h "" "$res/steps.log" | tail -40
