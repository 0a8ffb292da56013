#!/usr/bin/env bash
# Serve a GGUF model with llama.cpp's server built for this machine's CPU.
#
#   examples/eval/recorded/serve-native.sh MODEL.gguf [PORT=8093] [CTX=16384]
#
# Why: a portable build (the PyPI wheel xllamacpp) is built for AVX2 and no more, and cannot
# know the CPU it lands on. Built with -march=native on an AVX-512 VNNI machine, llama.cpp
# read the same summarizer prompts 1.09 to 1.23 times as fast, and wrote about as fast
# (compare-servers.py, side by side). Reading is most of a recording's time on two cores. A
# recent llama.cpp also keeps earlier prompts in RAM (--cache-ram), so a request that opens
# like an earlier one (a prose fallback after its structured call) reads only what differs.
#
# The sources are llama.cpp's, as vendored in the llama-cpp-python sdist on PyPI, pinned by
# SHA-256. The build takes about 5 minutes on two cores and is kept under $TAMP_LLM_DIR
# (default ~/.cache/tamp-llm), so a second run starts the server at once. cmake and ninja
# come from PyPI into a venv there when the machine has none. For recording answers on a
# developer's machine only: never a dependency of the build, the tests or CI.
set -euo pipefail

model=${1:?usage: serve-native.sh MODEL.gguf [PORT] [CTX]}
port=${2:-8093}
ctx=${3:-16384}
root=${TAMP_LLM_DIR:-$HOME/.cache/tamp-llm}
version=0.3.36
sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
url=https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/llama_cpp_python-$version.tar.gz
work=$root/llama.cpp-native-$version
server=$work/build/bin/llama-server

if [ ! -x "$server" ]; then
    mkdir -p "$work"
    sdist=$work/llama_cpp_python-$version.tar.gz
    if [ ! -f "$sdist" ]; then
        echo "downloading llama-cpp-python $version's sdist (73 MB) for its llama.cpp sources" >&2
        curl -fsSL -o "$sdist.part" "$url"
        mv "$sdist.part" "$sdist"
    fi
    echo "$sha256  $sdist" | sha256sum --check --quiet || {
        echo "serve-native.sh: $sdist does not have the pinned SHA-256; delete it and run again" >&2
        exit 1
    }
    tar -xzf "$sdist" -C "$work" --strip-components=3 "llama_cpp_python-$version/vendor/llama.cpp"
    if ! command -v cmake >/dev/null || ! command -v ninja >/dev/null; then
        venv=$root/venv
        [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet cmake ninja
        export PATH=$venv/bin:$PATH
    fi
    echo "building llama-server for this CPU (-march=native; about 5 minutes on two cores)" >&2
    cmake -S "$work" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF >"$work/cmake.log"
    cmake --build "$work/build" -j"$(nproc)" --target llama-server >"$work/build.log"
fi

# One slot, every core for reading and writing, 127.0.0.1 only.
threads=$(nproc)
exec "$server" -m "$model" --host 127.0.0.1 --port "$port" -c "$ctx" -np 1 -t "$threads" -tb "$threads"
