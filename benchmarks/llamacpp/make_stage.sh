#!/usr/bin/env bash
# Make the folder serve_load.sh and run.sh take on a GPU host without network: the cp312 wheels
# of pydantic and what it needs (whl/), and the pinned llama.cpp source trimmed to what a CUDA
# or CPU build of the server and benchmarks needs (llama.cpp-<commit>.tgz, about 7 MB).
# The source is the one llama-cpp-python 0.3.36's sdist vendors (llama.cpp 0c1e57098, the
# release hwadvisor's llama.cpp data was read at); models, docs, tests, examples and the other
# GPU backends are dropped, which the build does not need with the flags of build.sh.
# Usage: bash benchmarks/llamacpp/make_stage.sh [STAGE]   (default .out/stage, git-ignored)
set -euo pipefail
stage=${1:-.out/stage}
mkdir -p "$stage/whl"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d "$stage/whl" \
    pydantic==2.14.4
python3 -m pip download -q --no-deps --no-binary=:all: -d "$work" llama_cpp_python==0.3.36
tar -xzf "$work"/llama_cpp_python-0.3.36.tar.gz -C "$work"
src=$work/llama_cpp_python-0.3.36/vendor/llama.cpp
rm -rf "$src"/{models,docs,media,benches,tests,examples,pocs} "$src"/tools/ui/tests
rm -rf "$src"/ggml/src/ggml-{cann,openvino,webgpu,et,metal,hexagon,sycl,vulkan,opencl,virtgpu}
mv "$src" "$work/llama.cpp"
tar -czf "$stage/llama.cpp-0c1e57098.tgz" -C "$work" llama.cpp
du -sh "$stage"/* | sed 's/^/staged: /'
