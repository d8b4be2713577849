#!/usr/bin/env bash
# Configures and builds sluice (Release) into build/. Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
if [ -f build/CMakeCache.txt ] && ! grep -q "CMAKE_GENERATOR:INTERNAL=${gen[1]:-Unix Makefiles}" build/CMakeCache.txt; then
  rm -rf build
fi
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build "${gen[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
# SLUICE_TARGETS (e.g. "sluice") builds only those targets: the quickstart needs the binary alone.
targets=()
for t in ${SLUICE_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build build -j "$(nproc)" "${targets[@]}"
