#!/usr/bin/env bash
# The same gpt-tiny job (bench/jobs/gpt-parallel.textproto: d_model 128, 4
# blocks, 64 tokens, 64 samples a step) under each parallel strategy, the
# global batch held: data.batch_size x grad_accum_steps (4) x dp = 64. Prints
# the median step time over steps 10.. and the job's samples/s. Rounds
# alternate the strategies so a machine's drift hits them alike.
#   bench/model_parallel_throughput.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
train=build/bin/firedrill-train
# world tp pp micro-batch
configs=("2 1 1 8" "2 2 1 16" "2 1 2 16" "8 1 1 2" "8 2 2 8")
declare -A all
for ((r = 0; r < rounds; r++)); do
  for c in "${configs[@]}"; do
    read -r world tp pp batch <<<"$c"
    ms=$("$train" --job bench/jobs/gpt-parallel.textproto --steps 60 --log-every 1 --set world_size="$world" \
      --set parallel.tp="$tp" --set parallel.pp="$pp" --set data.batch_size="$batch" 2>/dev/null |
      awk '$1 == "step" && $2 >= 10 { for (i = 1; i <= NF; i++) if ($i == "ms") print $(i-1) }' |
      sort -n | awk '{ a[NR] = $1 } END { print (NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2) }')
    all["$c"]+="$ms "
  done
done
printf "%-6s %-3s %-3s %-3s %-6s %-28s %s\n" WORLD DP TP PP BATCH "STEP MS (median per round)" "SAMPLES/S (median round)"
for c in "${configs[@]}"; do
  read -r world tp pp batch <<<"$c"
  med=$(tr ' ' '\n' <<<"${all[$c]}" | grep . | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR+1)/2)] }')
  printf "%-6s %-3s %-3s %-3s %-6s %-28s %.0f\n" "$world" $((world / (tp * pp))) "$tp" "$pp" "$batch" "${all[$c]}" \
    "$(awk -v m="$med" 'BEGIN { print 64 * 1000 / m }')"
done
