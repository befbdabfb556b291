#!/usr/bin/env bash
# Issue 55's decision: the twelve DeepMind Control tasks of the README's two tables, the defaults against CleanRL's
# RPO as it is (--rpo-alpha 0.5 --ent-coef 0), 8M steps, seeds 1-3, each task's two sets from one machine (the
# second table's tasks from the TPU machine's cores, where its defaults ran; the first table's from the VM;
# HumanoidWalk's RPO seed 1 from the VM, the only mixed pair). Writes twelve.csv (the sets renamed "defaults" and
# "rpo05-ent0"; the run column keeps each run's own name) and the comparison in twelve/.
# Run from the project root: docs/families-screen/dmc-8m-rpo/twelve.sh [more report.py flags]
set -euo pipefail
d=docs/families-screen/dmc-8m-rpo
awk -F, -v OFS=, '
NR == 1 { print; next }
$3 > 3 { next }
{
  tpu = $1 ~ /^(AcrobotSwingup|PendulumSwingup|QuadrupedRun|FingerTurnHard|WalkerStand|HumanoidWalk)-v1$/
  if (tpu && $2 == "dmc2-8m-defaults" || !tpu && $2 == "dmc2-8m-defaults-vm") $2 = "defaults"
  else if (tpu && $2 == "dmc2-8m-rpo05-ent0" || !tpu && $2 == "dmc2-8m-rpo05-ent0-vm" || $2 == "hw-8m-rpo05-ent0") $2 = "rpo05-ent0"
  else next
  print
}' "$d/runs.csv" > "$d/twelve.csv"
uv run python report.py --finals "$d/twelve.csv" --reference rpo-dmc-8m --against defaults --out-dir "$d/twelve" "$@"
