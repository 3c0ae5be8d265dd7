#!/usr/bin/env bash
# The GPU check on a lent GPU machine, from the repository root (benchmarks/gpu/README.md gives the device call):
# prove the carried wheels resolve against the image's own packages, install them the way that machine needs, run the
# check. Results go to $1, else $OUT (the device tool's folder), else ./gpu_out.
set -u
out="${1:-${OUT:-gpu_out}}"
mkdir -p "$out"
if ! ls .whl/*.whl >/dev/null 2>&1; then
    echo "no wheels in .whl/: run python benchmarks/gpu/fetch_wheels.py here and carry .whl" >&2
    exit 2
fi
# the real offline proof: pip resolves the pins against what the image has installed
python3 -m pip install --dry-run --no-index --find-links .whl -r benchmarks/gpu/wheels.txt >"$out/wheels_dry_run.txt" 2>&1 \
    || echo "wheels: the dry run on the image failed (wheels_dry_run.txt); installing anyway" >&2
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
python3 -m pip list >"$out/pip_list.txt" 2>/dev/null
# 8-minute check; the outer timeout only guards against a hung runner (each stage is cut at its own budget)
timeout 560 python3 benchmarks/gpu/run.py --out "$out" 2>&1 | tee "$out/gpu_check.log"
