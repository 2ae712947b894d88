#!/usr/bin/env bash
# Build llama.cpp's llama-batched-bench from the sources of the installed llama-cpp-python (the same llama.cpp
# the embedded model runs on), for CPUs without AMX (the flags of the Makefile's CMAKE_ARGS), into $1/bin.
# Used by `make bench` once; about 7 minutes on 2 cores (pip fetches the sdist from the package index).
set -euo pipefail
dest=$(realpath -m "$1")
py=${PY:-.venv/bin/python}
version=$("$py" -c "import importlib.metadata as m; print(m.version('llama_cpp_python'))")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$py" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$work"
tar -xzf "$work"/llama_cpp_python-"$version".tar.gz -C "$work"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
# shellcheck disable=SC2086  # CMAKE_ARGS is a list of flags
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-} -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DBUILD_SHARED_LIBS=OFF >/dev/null
cmake --build "$work/build" --target llama-batched-bench -j "$(nproc)" >/dev/null
mkdir -p "$dest/bin"
cp "$work/build/bin/llama-batched-bench" "$dest/bin/"
echo "$version" > "$dest/VERSION"
echo "built $dest/bin/llama-batched-bench (llama-cpp-python $version's llama.cpp)"
