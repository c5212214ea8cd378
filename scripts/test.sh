#!/usr/bin/env bash
# Installs dependencies, builds RLX from scratch with AddressSanitizer +
# UndefinedBehaviorSanitizer and warnings as errors, runs every test with ctest,
# runs the CPU kernel tests (thread pool and every parallel kernel) under
# ThreadSanitizer, installs the Python package into a temporary virtual environment
# as the README does and runs its pytest suite, then runs each libFuzzer target for a
# bounded time. This is what CI runs.
#
#   scripts/test.sh                 # full run (fuzz 25 s per target)
#   RLX_FUZZ_SECONDS=10 scripts/test.sh
#   RLX_TEST_BUILD_DIR=build-test scripts/test.sh
#   RLX_JOBS=4 scripts/test.sh     # parallel compile jobs (default 2)
#   RLX_PYTHON=python3.11 scripts/test.sh  # the interpreter of the Python step
set -euo pipefail
cd "$(dirname "$0")/.."

# Each stage's start, with the minutes since this script began (to see where CI's time goes).
stage() { printf '== %s  [%dm%02ds]\n' "$1" $((SECONDS / 60)) $((SECONDS % 60)); }

bash scripts/install-deps.sh

build_dir="${RLX_TEST_BUILD_DIR:-build-test}"
fuzz_dir="${build_dir}-fuzz"
fuzz_seconds="${RLX_FUZZ_SECONDS:-25}"
jobs="${RLX_JOBS:-2}"

stage "configure (Debug, ASan+UBSan, -Werror, shared layers) in ${build_dir}"
# Shared layers: the programs share one copy of each layer (the build takes 3.2 GB of disk
# where static layers took 8.9 GB, and a CI machine's disk once ran out).
cmake -S . -B "${build_dir}" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DRLX_SANITIZE=ON -DRLX_WERROR=ON \
  -DRLX_SHARED_LAYERS=ON -DRLX_BUILD_BENCH=ON -DRLX_CUDA_ARCHS=90-real >/dev/null
stage "build"
cmake --build "${build_dir}" -j"${jobs}"

stage "test"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# Tests run side by side (each binary is single-process; caches are per test or atomic).
ctest --test-dir "${build_dir}" --output-on-failure -j"${jobs}"

tsan_dir="${build_dir}-tsan"
stage "ThreadSanitizer: CPU kernel tests in ${tsan_dir}"
cmake -S . -B "${tsan_dir}" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="-fsanitize=thread" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" -DRLX_CUDA=OFF -DRLX_BUILD_BENCH=OFF >/dev/null
cmake --build "${tsan_dir}" -j"${jobs}" --target rlx_cpu_kernels_tests
TSAN_OPTIONS="halt_on_error=1" "${tsan_dir}/tests/rlx_cpu_kernels_tests" --gtest_brief=1

# The README's install: a venv that sees Debian's numpy / pybind11 / pytest, then pip
# builds the extension module (Release, CPU) and installs it. pip builds in the tree:
# its CMake folder (build/temp.*/cmake) is kept, so a later run recompiles only what changed.
stage "Python package: pip install into a temporary venv, pytest python/tests"
python="${RLX_PYTHON:-python3}"
# A python3 ahead of Debian's on PATH (pyenv, conda) does not see the Debian packages.
if [ -z "${RLX_PYTHON:-}" ] && ! "$python" -c "import numpy, pytest" 2>/dev/null && [ -x /usr/bin/python3 ]; then
  python=/usr/bin/python3
fi
py_venv="$(mktemp -d)"
trap 'rm -rf "${py_venv}"' EXIT
"$python" -m venv --system-site-packages "${py_venv}"
RLX_JOBS="${jobs}" "${py_venv}/bin/pip" install --no-build-isolation -q .
"${py_venv}/bin/python" -m pytest -q -p no:cacheprovider python/tests

if [ -f fuzz/CMakeLists.txt ] && [ "${fuzz_seconds}" != "0" ]; then
  stage "fuzz (${fuzz_seconds} s per target, clang libFuzzer) in ${fuzz_dir}"
  # -O1, as libFuzzer's documentation advises: the unoptimized Debug build ran the IR-text
  # target at about 60 inputs a second, -O1 at about 1,100 (asserts and sanitizers kept).
  cmake -S . -B "${fuzz_dir}" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS=-O1 -DCMAKE_CXX_COMPILER=clang++ \
    -DRLX_BUILD_FUZZ=ON -DRLX_BUILD_TESTS=OFF -DRLX_BUILD_BENCH=OFF >/dev/null
  cmake --build "${fuzz_dir}" -j"${jobs}" --target rlx_fuzz_gguf rlx_fuzz_safetensors rlx_fuzz_tokenizer rlx_fuzz_lir_binary \
    rlx_fuzz_jinja rlx_fuzz_ir_text rlx_fuzz_safetensors_index rlx_fuzz_hf_config rlx_fuzz_imatrix rlx_fuzz_openai
  bash fuzz/run.sh "${fuzz_seconds}" "${fuzz_dir}"
fi
stage "all tests passed"
