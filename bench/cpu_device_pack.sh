#!/usr/bin/env bash
# Packs what bench/cpu_device_run.sh needs on a borrowed machine into .devpack/cpurun.tar.xz
# (git-ignored; the device call carries .devpack): the stripped CPU test and benchmark
# binaries and `rlx` of a Release build, the non-system shared libraries they load, and
# the GGUF conformance cases of the quantized models (plus stories260K-F32) with an
# index.json of just those cases (the F32 tiny models are left out for size).
# Usage: bench/cpu_device_pack.sh [BUILD_DIR (default build-rel)]
set -euo pipefail
build=${1:-build-rel}
conf=${RLX_CONFORMANCE_DIR:-../shared/conformance}
rm -rf .cpurun && mkdir -p .cpurun/lib .cpurun/conformance .devpack
cp "$build/tools/rlx" "$build/tests/rlx_cpu_kernels_tests" "$build/tests/rlx_integration_tests" \
  "$build/bench/rlx_kernels_qmatmul_bench" "$build/bench/rlx_kernels_gemm_bench" .cpurun/
strip .cpurun/rlx .cpurun/rlx_*
ldd .cpurun/rlx .cpurun/rlx_* | awk '/=> \// {print $3}' | sort -u |
  grep -E "libfmt|libicu|libtomlplusplus|libbenchmark|libgtest|httplib" | xargs -r -I{} cp -L {} .cpurun/lib/
if [ -d "$conf" ]; then
  python3 - "$conf" <<'PY'
import json, os, shutil, sys
conf = sys.argv[1]
keep = ("stories260K-", "llama-tiny-Q", "gemma2-tiny-Q")
index = json.load(open(f"{conf}/index.json"))
index["cases"] = [c for c in index["cases"] if c["model"].split("/")[-1].startswith(keep)]
out = ".cpurun/conformance"
for c in index["cases"]:
    man = json.load(open(f"{conf}/{c['manifest']}"))
    for rel in {c["model"], c["manifest"], man["logits"]["file"]}:
        os.makedirs(os.path.dirname(f"{out}/{rel}"), exist_ok=True)
        shutil.copy(f"{conf}/{rel}", f"{out}/{rel}")
shutil.copy(f"{conf}/tokens.json", out)
json.dump(index, open(f"{out}/index.json", "w"), indent=1)
print(f"{len(index['cases'])} conformance cases")
PY
fi
rm -f .devpack/cpurun.tar.xz
tar -cJf .devpack/cpurun.tar.xz .cpurun
ls -l .devpack/cpurun.tar.xz
