#!/usr/bin/env bash
# Packs what bench/cuda_device_run.sh needs on the GPU machine into .devpack/devrun.tar.xz
# (both folders are git-ignored; the device call carries .devpack): the stripped `rlx`
# and `rlx_cuda_tests` of a CUDA build, the non-system shared libraries they load, the
# small conformance models and, for the comparison with llama.cpp, their reference
# logits with the tokens they were made from (refs/cases.txt: case, model, tokens); and
# `rlx_integration_tests` with a trimmed conformance folder (.devrun/conformance: the
# GGUF cases of those models whose references are small, the moe/ set and a few HF
# checkpoints), which
# the run script executes with RLX_TEST_DEVICE=cuda; and `rlx_runtime_tests`, whose
# BackendOps suite runs every op on CUDA against the reference backend.
# RLX_PACK_CASES="case ..." replaces the default list of main-index cases whose models go
# along (each model brings every case of it with a reference under RLX_PACK_REF_MAX bytes,
# default 1.1 MB).
# RLX_PACK_MOE=0 leaves the moe/ set out.
# Usage: [RLX_PACK_HF="bert ..."] [RLX_PACK_CASES="..."] bench/cuda_device_pack.sh [BUILD_DIR (default build-cuda)] [OLD_TESTS_BINARY] [OLD_RLX]
# OLD_TESTS_BINARY and OLD_RLX, if given, go along as rlx_cuda_tests_old and rlx_old (a
# baseline in the same call).
set -euo pipefail
build=${1:-build-cuda}
old=${2:-}
old_rlx=${3:-}
conf=${RLX_CONFORMANCE_DIR:-../shared/conformance}
rm -rf .devrun && mkdir -p .devrun/lib .devrun/models .devrun/refs .devpack
cp "$build/tools/rlx" "$build/tests/rlx_cuda_tests" "$build/tests/rlx_integration_tests" "$build/tests/rlx_runtime_tests" .devrun/
[ -z "$old" ] || { cp "$old" .devrun/rlx_cuda_tests_old && strip .devrun/rlx_cuda_tests_old; }
[ -z "$old_rlx" ] || { cp "$old_rlx" .devrun/rlx_old && strip .devrun/rlx_old; }
strip .devrun/rlx .devrun/rlx_cuda_tests .devrun/rlx_integration_tests .devrun/rlx_runtime_tests
# Libraries from this machine's packages that the GPU machine may lack (CUDA's own and
# the C/C++ runtime are there).
ldd .devrun/rlx .devrun/rlx_cuda_tests | awk '/=> \// {print $3}' | sort -u |
  grep -E 'libfmt|libicu|libtomlplusplus|libcpp-httplib|libbrotli' | xargs -r -I{} cp -L {} .devrun/lib/
if [ -d "$conf" ]; then
  python3 - "$conf" <<'PY'
import json, os, shutil, sys
conf = sys.argv[1]
seqs = json.load(open(f"{conf}/tokens.json"))["sequences"]
cases = os.environ.get("RLX_PACK_CASES", "").split() or [
    "stories260K-F32__tok512-8__kvf32", "stories260K-Q8_0__tok512-8__kvf32",
    "llama-tiny-Q4_K_M__spm-8__kvf32", "gemma2-tiny-Q8_0__spm-8__kvf32", "llama3-tiny-F32__tok512-64__kvf32"]
lines = []
for c in json.load(open(f"{conf}/index.json"))["cases"]:
    if c["case"] not in cases:
        continue
    shutil.copy(f"{conf}/{c['model']}", ".devrun/models/")
    shutil.copy(f"{conf}/refs/{c['case']}.logits.bin", ".devrun/refs/")
    toks = ",".join(map(str, seqs[c["sequence"]]["tokens"]))
    lines.append(f"{c['case']} {c['model'].split('/')[-1]} {toks}")
open(".devrun/refs/cases.txt", "w").write("\n".join(lines) + "\n")
print(f"{len(lines)} conformance cases")
# The trimmed suite: every case of the packed models whose reference is under 1.1 MB.
import os
index = json.load(open(f"{conf}/index.json"))
models = {c["model"] for c in index["cases"] if c["case"] in cases}
keep = [c for c in index["cases"] if c["model"] in models and
        os.path.getsize(f"{conf}/refs/{c['case']}.logits.bin") < int(os.environ.get("RLX_PACK_REF_MAX", "1100000"))]
out = ".devrun/conformance"
for sub in ("models", "refs", "hf"):
    os.makedirs(f"{out}/{sub}", exist_ok=True)
for c in keep:
    model = f"{out}/{c['model']}"
    if not os.path.lexists(model):  # the same file as .devrun/models/ holds
        os.symlink(f"../../models/{os.path.basename(c['model'])}", model)
    for f in (c["manifest"], f"refs/{c['case']}.logits.bin"):
        shutil.copy(f"{conf}/{f}", f"{out}/{f}")
shutil.copy(f"{conf}/tokens.json", out)
json.dump(dict(index, cases=keep), open(f"{out}/index.json", "w"))
# The 64 MiB carry limit: room for about two checkpoints beside the binaries; RLX_PACK_HF
# (space-separated folder names) picks others, e.g. "bert nomic-bert modernbert".
hfs = tuple(os.environ.get("RLX_PACK_HF", "llama3-ropescaled qwen3-moe").split())  # "-": none
hfs = tuple(h for h in hfs if h != "-")
for hf in hfs:
    shutil.copytree(f"{conf}/hf/{hf}", f"{out}/hf/{hf}")
if os.path.isdir(f"{conf}/moe") and os.environ.get("RLX_PACK_MOE", "1") == "1":  # the MoE GGUF set, whole (3 MB)
    shutil.copytree(f"{conf}/moe", f"{out}/moe")
print(f"{len(keep)} cases, the moe/ set and {len(hfs)} HF checkpoints for the suite on CUDA")
PY
else
  echo "no $conf: conformance models left out"
fi
rm -f .devpack/devrun.tar.xz
tar -cJf .devpack/devrun.tar.xz .devrun
ls -l .devpack/devrun.tar.xz
