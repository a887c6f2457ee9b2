#!/usr/bin/env bash
# Build llama.cpp's CUDA tools for Hopper (sm_90) from a source tree without network access.
# Usage: bash build.sh SRC_DIR BUILD_DIR  (only the four tools the benchmarks use are built)
set -euo pipefail
src=$1 build=$2
export PATH=/usr/local/cuda/bin:$PATH
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CCACHE=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF
cmake --build "$build" -j16 --target llama-server llama-bench llama-batched-bench llama-quantize
