#!/usr/bin/env bash
# The soundness runs of issue 14 on a GPU, in one call (results under $OUT, or ./soundness_out):
#   1. the differential op fuzzer with many rounds (TESSERA_OP_FUZZ_ROUNDS) in compiled mode;
#   2. bounds, bad-input and tile-op tests under compute-sanitizer memcheck (an access outside a
#      tensor is an error even where the result happens to be right);
#   3. a slice of the op fuzzer under memcheck.
# Usage (device tool): bash benchmarks/soundness_gpu.sh [fuzz rounds, default 10]
set -u
OUT=${OUT:-soundness_out}
mkdir -p "$OUT"
ROUNDS=${1:-10}
export PYTHONPATH=.
PYTEST=(python3 -m pytest --device cuda -q -p no:warnings -o addopts="")
SANITIZE=(env PYTORCH_NO_CUDA_MEMORY_CACHING=1 TESSERA_AUTOTUNE_EFFORT=none
          compute-sanitizer --tool memcheck --error-exitcode 99)

start=$(date +%s)
TESSERA_OP_FUZZ_ROUNDS=$ROUNDS timeout 240 "${PYTEST[@]}" -n 8 tests/test_op_fuzz.py > "$OUT/op_fuzz_rounds$ROUNDS.txt" 2>&1
echo "op fuzz, $ROUNDS rounds: rc=$? in $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"

start=$(date +%s)
timeout 200 "${SANITIZE[@]}" "${PYTEST[@]}" tests/test_bounds.py tests/test_bad_inputs.py tests/test_tile_ops.py \
    > "$OUT/memcheck_bounds.txt" 2>&1
echo "memcheck bounds/bad inputs/tile ops: rc=$? in $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"

start=$(date +%s)
timeout 150 "${SANITIZE[@]}" "${PYTEST[@]}" tests/test_op_fuzz.py -k "as-int8 or as-float16" \
    > "$OUT/memcheck_op_fuzz.txt" 2>&1
echo "memcheck op fuzz slice: rc=$? in $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
for f in "$OUT"/*.txt; do echo "== $f"; grep -E "passed|failed|ERROR SUMMARY|Invalid" "$f" | tail -4; done
