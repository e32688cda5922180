#!/bin/bash
# Session 12, device call 2 (H100): before/after of the heuristic change in one call.
# Trees: $1 = base (commit before the change), $2 = new. B4 H32 S4096 bf16; every row checked
# against float32 SDPA (backward: its autograd gradients). In the new tree, the old heuristic
# Configs are timed again as explicit Configs beside the new heuristic, two rounds, interleaved.
export PYTHONUNBUFFERED=1 TESSERA_AUTOTUNE_EFFORT=none TESSERA_PREWARM=0
BASE=$(realpath $1); NEW=$(realpath $2); W=${OUT:-/tmp/out}/w; mkdir -p $W
P=benchmarks/attention_bwd_profile.py
OLD128="{'block_sizes': [32, 64, 128, 64, 256], 'l2_grouping': 8}"
cd $NEW
python3 $P time --cases 128:0,128:1 --repeat 2 --configs "[$OLD128, {'l2_grouping': 8}]" --out $W --label _new 2>&1 | tee $W/new_bwd128.log
python3 $P time --cases 64:0,64:1 --repeat 2 --configs "[{'l2_grouping': 8}]" --out $W --label _new 2>&1 | tee $W/new_bwd64.log
python3 $P forward --cases 128:0,128:1,64:0,64:1 --repeat 2 --configs "[{'l2_grouping': 8}]" --out $W --label _new 2>&1 | tee $W/new_fwd.log
python3 $P time --head-dim 64 --configs "[{'block_sizes': [64, 32, 128, 64, 128]}, {'block_sizes': [64, 64, 64, 64, 128]}, {'block_sizes': [64, 64, 128, 64, 256]}, {'block_sizes': [64, 64, 128, 128, 128]}]" --out $W --label _sweep 2>&1 | tee $W/new_sweep64.log
cd $BASE
python3 $P time --cases 128:0,128:1,64:0,64:1 --out $W --label _base 2>&1 | tee $W/base_bwd.log
python3 $P forward --cases 128:0,128:1,64:0,64:1 --out $W --label _base 2>&1 | tee $W/base_fwd.log
cd $W && cat new_*.log base_*.log | grep '^{' > all_rows.jsonl
tar -czf ${OUT:-/tmp/out}/call2.tar.gz -C $W .
