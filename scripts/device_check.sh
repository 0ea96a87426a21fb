#!/usr/bin/env bash
# The whole device check in one command: the fast-step benchmark (plain vs fast step per
# model, ratio to the device's floor, all models as one group), then the WikiText-2 table
# inside the rest of the budget, with every small result file in one archive.  What it
# leaves in $OUT:
#   benchmark-<config>-<cpu|gpu>-fast-step.json (and tf32/ the same with TF32 on a GPU),
#   table.tgz (the table's plan, results/*.json with results/table.json, each job's
#   metrics.jsonl; the archive's folder is named after TABLE_DIR),
#   device_check.log.
#
# On a lent GPU (repository root, the corpus in data/cache/wikitext-2; see
# data/results/wikitext2/README.md):   scripts/device_check.sh
# The CPU dry run (smoke config, a synthetic corpus):   SMOKE=1 BUDGET_S=60 scripts/device_check.sh
#
# Settings (environment): OUT (default /tmp/device-check), BUDGET_S (wall seconds for the
# whole script, default 540), SMOKE=1, SEEDS (default 1111), PYTHON (default python3),
# WHEELS (a folder of wheels to install from when a module is missing; default wheels/),
# TABLE_DIR (the table's run folder with its checkpoints, ~110 MB a model at `full`, kept
# out of $OUT; default /tmp/stablernn-table: a rerun on the same machine resumes it).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/device-check}
BUDGET_S=${BUDGET_S:-540}
SEEDS=${SEEDS:-1111}
PY=${PYTHON:-python3}
WHEELS=${WHEELS:-wheels}
TABLE_DIR=${TABLE_DIR:-/tmp/stablernn-table}
START=$(date +%s)
mkdir -p "$OUT"
exec > >(tee -a "$OUT/device_check.log") 2>&1

# The library and the tooling run from the checkout (no install): torch and tqdm are all
# they import on this path.  A missing module comes from carried wheels, never the network.
export PYTHONPATH="$PWD:$PWD/tools${PYTHONPATH:+:$PYTHONPATH}"
if [ -d data/cache/gitdir ]; then export GIT_DIR=$PWD/data/cache/gitdir GIT_WORK_TREE=$PWD; fi
for module in torch tqdm; do
  if ! "$PY" -c "import $module" 2>/dev/null; then
    [ -d "$WHEELS" ] || { echo "missing $module and no $WHEELS/ folder of wheels"; exit 2; }
    "$PY" -m pip install --quiet --no-index --find-links "$WHEELS" "$module"
  fi
done
VARIANTS="rnn-unconstrained@full-rnn-lr2 rnn-stable@full-rnn-lr2 lstm-unconstrained lstm-stable"
if [ "${SMOKE:-0}" = 1 ]; then
  CONFIG=smoke VARIANTS="rnn-unconstrained rnn-stable lstm-unconstrained lstm-stable"
  CORPUS_DIR="$OUT/synthetic-corpus"
  DATA=(--corpus-folder "$CORPUS_DIR")
  BENCH=(--modes plain eager --group-mode eager --steps 3)
  RESERVE=10
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
else
  CONFIG=full CORPUS_DIR=""
  DATA=(--data "${STABLERNN_DATA:-data/cache}")
  BENCH=(--modes plain eager graph --group-mode graph --steps 30 --tf32-check)
  RESERVE=30
fi
"$PY" - "$CORPUS_DIR" <<'PY'
import sys
import torch
gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
print(f"torch {torch.__version__}, GPU: {gpu}", flush=True)
if sys.argv[1]:  # the dry run's corpus
    from stablernn_tools.synthetic_corpus import write_synthetic_corpus
    write_synthetic_corpus(sys.argv[1], lines=(1500, 60, 60))
PY
read -r -a VARIANT_LIST <<< "$VARIANTS"
read -r -a SEED_LIST <<< "$SEEDS"

# The benchmark (plain and fast steps of every model, all of them as one group; on a GPU
# also TF32 against FP32), then the table in what is left of the budget, as one group when
# the benchmark says it pays off and fits, else one job after another.  The table writes
# the archive after every job; `timeout` only guards against a hang.
COMMON=(--config "$CONFIG" --variants "${VARIANT_LIST[@]}" --seeds "${SEED_LIST[@]}")
echo "== benchmark ($CONFIG) =="
"$PY" -m stablernn_tools.benchmark fast-step "${COMMON[@]}" "${DATA[@]}" "${BENCH[@]}" \
  --out "$OUT" || echo "benchmark exited $?"
KIND=$([ "$CONFIG" = smoke ] && echo cpu || echo gpu)
# The table's budget: what is left, less Python's start; past the end, one second of
# training still writes the unfinished records and the archive.
LEFT=$(( BUDGET_S - ($(date +%s) - START) - 10 ))
LEFT=$(( LEFT > RESERVE ? LEFT : RESERVE + 1 ))
echo "== table ($CONFIG): $LEFT s =="
timeout --signal=TERM $(( LEFT + 20 )) "$PY" -m stablernn_lib paper-run run \
  --out "$TABLE_DIR" "${COMMON[@]}" "${DATA[@]}" --budget-s "$LEFT" \
  --reserve-s "$RESERVE" --together auto --bench-file "$OUT/benchmark-$CONFIG-$KIND-fast-step.json" \
  --step graph --projection iterative --archive "$OUT/table.tgz" || echo "table exited $?"
[ -f "$OUT/table.tgz" ] && echo "archive: $OUT/table.tgz ($(du -k "$OUT/table.tgz" | cut -f1) KiB)"
echo "device check done in $(( $(date +%s) - START )) s"
