#!/bin/bash
# Session 12, device call 1 (H100): attention backward at B4 H32 S4096 bf16. Timing of Tessera's
# heuristic Config and variants, the hand-written probe (benchmarks/_triton_attention_bwd.py) and
# SDPA; then ncu of each. Run from the tree's root: bash benchmarks/results/issue17/s12/call1.sh
export PYTHONUNBUFFERED=1 TESSERA_AUTOTUNE_EFFORT=none TESSERA_PREWARM=0
W=${OUT:-/tmp/out}/w; mkdir -p $W
P="python3 benchmarks/attention_bwd_profile.py"
C="[{'l2_grouping': 1}, {'block_sizes': [32, 64, 128, 64, 128]}, {'block_sizes': [32, 64, 128, 64, 128], 'l2_grouping': 1}, {'block_sizes': [32, 64, 128, 32, 128], 'l2_grouping': 1}, {'block_sizes': [32, 32, 128, 64, 128], 'l2_grouping': 1}, {'block_sizes': [32, 64, 128, 64, 128], 'l2_grouping': 1, 'indexing': 'tensor_descriptor'}]"
R="[(64, 128, 128, 64, 8, 3), (32, 128, 128, 32, 8, 3)]"
(which ncu; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv) > $W/env.txt 2>&1
$P time --configs "$C" --probes "$R" --out $W 2>&1 | tee $W/time_d128.log
$P time --head-dim 64 --configs "[{'l2_grouping': 1}]" --out $W 2>&1 | tee $W/time_d64.log
$P forward --configs "[{'l2_grouping': 1}]" --out $W 2>&1 | tee $W/forward_d128.log
S="--section SpeedOfLight --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis --section WarpStateStats --section ComputeWorkloadAnalysis --section SchedulerStats --section InstructionStats"
n=0
for impl in "tessera heuristic" "tessera {'l2_grouping': 1}" "probe (64, 128, 128, 64, 8, 3)" "SDPA autograd backward"; do
  n=$((n + 1))
  timeout 120 ncu --clock-control none --profile-from-start off $S -f -o $W/ncu_$n $P one "$impl" --configs "$C" --probes "$R" > $W/ncu_${n}_run.log 2>&1
  echo "$impl" > $W/ncu_$n.txt
  ncu -i $W/ncu_$n.ncu-rep --page details >> $W/ncu_$n.txt 2>&1
  rm -f $W/ncu_$n.ncu-rep
done
tar -czf ${OUT:-/tmp/out}/call1.tar.gz -C $W .
