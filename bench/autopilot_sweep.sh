#!/usr/bin/env bash
# The autopilot over scenarios and seeds: how often it solves a drill from
# what a learner can see (`make test` plays each scenario once, on one seed).
#
#   bench/autopilot_sweep.sh [--seeds "8101 8102 8103"] [--out FILE.tsv] SCENARIO...
#
# Starts its own controller (a private state directory), plays
# `firedrill autopilot SCENARIO --seed N` for every pair, one at a time, and
# appends a row per play to FILE.tsv: scenario, seed, exit status, seconds,
# the score's total, the diagnosis, the fix and verification's verdict line.
# A play solved the drill when its fix verified (the time item may take a
# point or two of a 100). Each play's whole output is kept beside it, in
# FILE-logs/SCENARIO-SEED.log. Then prints a table per scenario. Rows
# already in FILE.tsv are kept and their pairs skipped, so a stopped sweep
# goes on where it left off.
set -euo pipefail
cd "$(dirname "$0")/.."
seeds="8101 8102 8103"
out=""
args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seeds) seeds="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
    -*) echo "autopilot_sweep: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
if [[ ${#args[@]} -eq 0 ]]; then
  echo "autopilot_sweep: name at least one scenario (build/bin/firedrill scenarios lists them)" >&2
  exit 2
fi
fd=build/bin/firedrill
[[ -x $fd ]] || { echo "autopilot_sweep: $fd is missing: build first (make build)" >&2; exit 2; }
out=${out:-/tmp/autopilot-sweep-$(date +%Y%m%d-%H%M%S).tsv}
[[ -f $out ]] || printf 'scenario\tseed\trc\tseconds\ttotal\tdiagnosis\tfix\tverification\n' > "$out"

export FIREDRILL_STATE_DIR
FIREDRILL_STATE_DIR=$(mktemp -d /tmp/fd-sweep.XXXXXX)
logs=${out%.tsv}-logs
mkdir -p "$logs"
trap '$fd down >/dev/null 2>&1 || true; rm -rf "$FIREDRILL_STATE_DIR"' EXIT
$fd up >/dev/null

for s in "${args[@]}"; do
  for n in $seeds; do
    if awk -F'\t' -v s="$s" -v n="$n" '$1 == s && $2 == n {found = 1} END {exit !found}' "$out"; then
      continue
    fi
    log=$logs/$s-$n.log
    t0=$(date +%s)
    rc=0
    $fd autopilot "$s" --seed "$n" > "$log" 2>&1 || rc=$?
    secs=$(( $(date +%s) - t0 ))
    total=$(awk '$1 == "total" {print $2; exit}' "$log")
    diag=$(awk '/^diagnosis: / {sub(/^diagnosis: /, ""); print; exit}' "$log")
    fix=$(awk '/^fix: / {sub(/^fix: /, ""); print; exit}' "$log")
    verdict=$(grep -o '^verification [A-Z]*' "$log" | head -1 || true)
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$s" "$n" "$rc" "$secs" "${total:--}" "${diag:--}" \
      "${fix:--}" "${verdict:--}" >> "$out"
    echo "$s seed $n: rc=$rc ${secs}s total ${total:--}" >&2
  done
done

# One row per scenario: plays, solved (the fix verified), 100 points, seeds.
echo
echo "| scenario | plays | fix verified | 100/100 | seeds | seconds per play |"
echo "|---|---|---|---|---|---|"
awk -F'\t' 'NR > 1 {
    k = $1; plays[k]++
    if ($3 == 0 && $8 == "verification PASSED") ok[k]++
    if ($3 == 0 && $5 == 100) full[k]++
    seeds[k] = seeds[k] (seeds[k] ? ", " : "") $2; secs[k] += $4
    if (!(k in order)) { order[k] = ++n; names[n] = k }
  }
  END {
    for (i = 1; i <= n; i++) {
      k = names[i]
      printf "| %s | %d | %d | %d | %s | %.0f |\n", k, plays[k], ok[k] + 0, full[k] + 0, seeds[k], secs[k] / plays[k]
    }
  }' "$out"
echo
echo "rows: $out"
