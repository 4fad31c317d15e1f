#!/usr/bin/env bash
# The book's GPU checks, in one run on a CUDA machine from a clean checkout (results go to $OUT, default ./gpu_out):
#   0. the claims ledger's training path (lengthx.evidence, chapter 57): `lengthx reproduce` of the units main, seeds,
#      more_seeds and baselines at $BUDGET (seed 0 of every encoding, seeds 1 and 2 of the ledger's), each unit in its own
#      process at the same time on the one device (a small model leaves most of a GPU idle), each with its own output
#      folder, merged into $OUT/res; the headline file main_$BUDGET.json copied to $OUT, and the ledger printed with
#      these results beside the committed ones.
#      On a CPU, `OUT=d BUDGET=smoke bash tools/gpu_checks.sh` runs this path at the smoke budget and stops after it;
#   1. chapter 43's measurement on the GPU: `lengthx reproduce --budget colab --only dape_fast`;
#   1b. chapter 13's long-document grid at the GPU preset (every method, the 4 stdlib documents that hold 4L tokens, 10 shared keys):
#      `lengthx reproduce --budget colab --only long_docs`, resumable: an overrun leaves its partial file in $OUT;
#   1c. chapter 15's RULER grid on SmolLM2 at the GPU preset (six tasks, 20 samples a cell, every long-document method at
#      4K-32K): `lengthx reproduce --budget colab --only ruler`, resumable cell by cell;
#   2. the compiled Triton refine kernel against the reference (tests/test_fused_refine.py's GPU tests);
#   3. chapter 60's budget search: `lengthx reproduce --budget colab --only che_budget`.
# T_LEDGER=0 skips step 0, T_LONG=0 step 1b, T_RULER=0 step 1c, T_CHE=0 step 3. Each step has its own time limit, so one that fails or overruns leaves the others' results.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_out}; BUDGET=${BUDGET:-colab}; mkdir -p "$OUT/res"
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
LX="import sys; from lengthx.cli import main; sys.exit(main(sys.argv[1:]))"   # the lengthx command, uninstalled

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee "$OUT/gpu.txt"
python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.cuda.is_available())" 2>&1 | tee -a "$OUT/gpu.txt"
git rev-parse HEAD 2>&1 | tee -a "$OUT/gpu.txt"; git status --porcelain --untracked-files=no -- lengthx 2>&1 | tee -a "$OUT/gpu.txt"
if [ "${T_LEDGER:-240}" != 0 ]; then
  t=$(date +%s)
  for u in main seeds more_seeds baselines; do   # one process per unit, all at once; each unit resumes from its own folder
    ( timeout ${T_LEDGER:-240} python -c "$LX" reproduce --budget "$BUDGET" --only $u --out "$OUT/lane_$u" --allow-dirty --quiet \
        > "$OUT/lane_$u.log" 2>&1; echo "$u: exit $?" >> "$OUT/lane_$u.log" ) &
  done
  wait
  for u in main seeds more_seeds baselines; do
    tail -3 "$OUT/lane_$u.log"
    cp "$OUT/lane_$u/${u}_$BUDGET.json" "$OUT/res/" 2>/dev/null || cp "$OUT"/lane_$u/runs/*/$u.partial.json "$OUT/" 2>/dev/null || true
  done
  cp "$OUT/res/main_$BUDGET.json" "$OUT/" 2>/dev/null || true
  python - "$OUT/res" "$BUDGET" <<'PY' 2>&1 | tee "$OUT/ledger.md"
import sys, torch
from lengthx.evidence import ledger, ledger_table
from lengthx.results import load_results
recs = load_results(["nbs/results", sys.argv[1]])
# on a GPU the new files fill the ledger's GPU column; on a CPU they are read as the main column at their own budget
print(ledger_table(ledger(recs, preset="cpu" if torch.cuda.is_available() else sys.argv[2])))
PY
  echo "ledger path: $(( $(date +%s) - t )) s"
fi
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || { echo "no GPU: the GPU-only steps are skipped"; ls -la "$OUT"; exit 0; }
t=$(date +%s)
timeout ${T_DAPE:-240} python -c "$LX" reproduce --budget "$BUDGET" --only dape_fast --out "$OUT/res" --allow-dirty --quiet 2>&1 | tail -15
echo "dape_fast: $(( $(date +%s) - t )) s"
cp "$OUT"/res/runs/*/*.partial.json "$OUT/" 2>/dev/null || true   # what an overrun unit had finished (runs/ is too deep to come back)
if [ "${T_LONG:-180}" != 0 ]; then
  t=$(date +%s)
  timeout ${T_LONG:-180} python -c "$LX" reproduce --budget "$BUDGET" --only long_docs --out "$OUT/res" --allow-dirty --quiet 2>&1 | tail -5
  echo "long_docs: $(( $(date +%s) - t )) s"
  cp "$OUT"/res/runs/*/long_docs.partial.json "$OUT/" 2>/dev/null || true
fi
if [ "${T_RULER:-150}" != 0 ]; then
  t=$(date +%s)
  timeout ${T_RULER:-150} python -c "$LX" reproduce --budget "$BUDGET" --only ruler --out "$OUT/res" --allow-dirty --quiet 2>&1 | tail -5
  echo "ruler: $(( $(date +%s) - t )) s"
  cp "$OUT"/res/runs/*/ruler.partial.json "$OUT/" 2>/dev/null || true
fi
t=$(date +%s)
timeout ${T_TEST:-150} python -m pytest -v -p no:cacheprovider tests/test_fused_refine.py tests/test_parts.py -k cuda 2>&1 | tee "$OUT/pytest_gpu.txt" | grep -E "PASS|FAIL|Error|passed|failed"
echo "gpu tests: $(( $(date +%s) - t )) s"
[ "${T_CHE:-300}" = 0 ] && exit 0
t=$(date +%s)
timeout ${T_CHE:-300} python -c "$LX" reproduce --budget "$BUDGET" --only che_budget --out "$OUT/res" --allow-dirty --quiet 2>&1 | tail -15
echo "che_budget: $(( $(date +%s) - t )) s"
cp "$OUT"/res/runs/*/*.partial.json "$OUT/" 2>/dev/null || true
ls -la "$OUT" "$OUT/res"
