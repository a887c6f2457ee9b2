#!/usr/bin/env bash
# llama-server under load on a GPU host without network (docs/benchmarks.md): build the pinned
# llama.cpp with CUDA (or unpack a build carried from an earlier call), write random-weight GGUF
# files of the presets' shapes in F16 and Q4_K_M, then run benchmarks/llamacpp/serve_load.py on
# each: hwadvisor's load generator at several request rates and concurrencies, measured beside
# the model's prediction.
# STAGE holds llama.cpp-*.tgz, whl/ (pydantic and friends, cp312) and, optionally,
# llamacpp-bin.tar.xz.* (a build packed by PACK_BIN=1); make_stage.sh makes it.
# Usage: bash serve_load.sh STAGE    (PRESETS="llama-3.2-1b llama-3-8b", DTYPES="q4_k_m f16",
#        SLOTS=16, BUDGET_S=560, PACK_BIN=1, EXTRA="--n-gpu-layers 999", MODES="streams unified"
#        (unified adds --kv-unified),
#        SLOT_RUNS="0;0,8;0,1" to time busy slots side by side or apart first (slot_runs.py));
#        results in $OUT/res, packed as $OUT/serve_load.tgz
set -u
stage=$(cd "$1" && pwd)
code=$(cd "$(dirname "$0")/../.." && pwd)
t_start=$SECONDS
budget=${BUDGET_S:-560}
left() { echo $(( budget - (SECONDS - t_start) )); }
export PYTHONUNBUFFERED=1 PATH=/usr/local/cuda/bin:$PATH
res=${OUT:-/tmp/out}/res; mkdir -p "$res"
work=/tmp/llc; mkdir -p "$work/models"; bin=$work/build/bin; m=$work/models
log() { echo "[$(( SECONDS - t_start ))s] $*" | tee -a "$res/steps.log"; }

{ date -u +%FT%TZ; nvidia-smi; nvcc --version; nproc; free -g; } >"$res/env.txt" 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$stage"/whl/*.whl >>"$res/steps.log" 2>&1
export PYTHONPATH=/tmp/site:$code
[ -d "$work/llama.cpp" ] || tar -xzf "$stage"/llama.cpp-*.tgz -C "$work"
rm -f "$work/llama.cpp/.git"  # a submodule pointer to a folder that is not there
PRESETS=${PRESETS:-llama-3.2-1b llama-3-8b}
DTYPES=${DTYPES:-q4_k_m f16}
(for p in $PRESETS; do
    [ -s "$m/$p-f16.gguf" ] || PYTHONPATH=$work/llama.cpp/gguf-py python3 "$code/benchmarks/llamacpp/make_gguf.py" \
        "$code/hwadvisor/workload/presets/$p.json" "$m/$p-f16.gguf.tmp" && mv -f "$m/$p-f16.gguf.tmp" "$m/$p-f16.gguf" 2>/dev/null
done >"$res/gguf.log" 2>&1) &
gguf_pid=$!
if [ ! -x "$bin/llama-server" ] && compgen -G "$stage/llamacpp-bin.tar.xz.*" >/dev/null; then
    mkdir -p "$work/build" && cat "$stage"/llamacpp-bin.tar.xz.* | tar -xJ -C "$work/build" && log "carried build unpacked"
fi
if [ ! -x "$bin/llama-server" ]; then
    log "build start"
    timeout $(( $(left) - 60 )) bash "$code/benchmarks/llamacpp/build.sh" "$work/llama.cpp" "$work/build" \
        >"$work/build.log" 2>&1; log "build rc=$?"; tail -20 "$work/build.log" >"$res/build_tail.txt"
    [ -x "$bin/llama-server" ] || { log "no build"; exit 1; }
    if [ -n "${PACK_BIN:-}" ]; then
        (cd "$work/build" && tar -cf - bin | xz -T0 -6 | split -b 15M - "${OUT:-/tmp/out}/llamacpp-bin.tar.xz."
         log "build packed") &
    fi
fi
wait $gguf_pid; log "gguf: $(ls -la $m | tr '\n' ';')"
port=18300
for p in $PRESETS; do
    for d in $DTYPES; do
        f=$m/$p-$d.gguf
        if [ ! -s "$f" ]; then
            timeout 200 "$bin/llama-quantize" "$m/$p-f16.gguf" "$f.tmp" "${d^^}" 16 >"$res/quantize_$p.log" 2>&1 \
                && mv -f "$f.tmp" "$f"
        fi
        [ "$(left)" -gt 90 ] || { log "out of time before $p $d"; break 2; }
        wd=$d; [ "$d" = f16 ] && wd=fp16
        port=$((port + 1))
        if [ -n "${SLOT_RUNS:-}" ]; then  # busy slots side by side or apart (slot_runs.py)
            timeout 120 python3 "$code/benchmarks/llamacpp/slot_runs.py" --server "$bin/llama-server" \
                --model "$f" --shape "$code/hwadvisor/workload/presets/$p.json" --weights-dtype "$wd" \
                --slots 16 --port $((port + 50)) --extra "${EXTRA:---n-gpu-layers 999}" --gen-len 128 \
                --placements "$SLOT_RUNS" --out "$res/slots_${p}_${d}.json" 2>&1 | tee -a "$res/steps.log"
        fi
        for mode in ${MODES:-streams}; do  # streams: --parallel as given; unified: with --kv-unified
            [ "$(left)" -gt 90 ] || { log "out of time before $p $d $mode"; break 3; }
            flags=${EXTRA:---n-gpu-layers 999}; [ "$mode" = unified ] && flags="$flags --kv-unified"
            port=$((port + 1))
            timeout $(( $(left) - 30 )) python3 "$code/benchmarks/llamacpp/serve_load.py" --server "$bin/llama-server" \
                --model "$f" --shape "$code/hwadvisor/workload/presets/$p.json" --weights-dtype "$wd" \
                --slots "${SLOTS:-16}" --port $port --time-limit "${LOAD_LIMIT_S:-45}" --requests "${REQUESTS:-120}" \
                ${SHARES:+--shares "$SHARES"} ${CONCURRENCY:+--concurrency "$CONCURRENCY"} --extra "$flags" \
                --out "$res/load_${p}_${d}_${mode}.json" 2>&1 | tee -a "$res/steps.log"
            log "load $p $d $mode rc=${PIPESTATUS[0]}"
        done
    done
done
wait; log "end"
(cd "$res/.." && tar -czf "${OUT:-/tmp/out}/serve_load.tgz" res)
tail -40 "$res/steps.log"
