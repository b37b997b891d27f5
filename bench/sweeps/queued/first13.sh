# One device call (about 9 minutes) for the thirteenth session: the bf16 GPU tests of the
# compiled engines, hc_pre and the matmuls at HEAD (3cdc45a's forming text and 3eebe0d's formed
# first site have not yet run on a GPU); then evict_and_lo.sh; then llama bench's decode against
# reduce-overhead in one run and the KDA layer. Run from the repository root with transformers'
# wheel on PYTHONPATH; logs under $OUT.
timeout 200 python3 -m pytest -p no:xdist -o addopts=-ra -m gpu -q -x \
    tests/runtime/test_compiled_gpu.py tests/codegen/test_hc_pre.py tests/codegen/test_matmul.py \
    2>&1 | tail -15 | tee "$OUT/tests_gpu.log"
bash bench/sweeps/queued/evict_and_lo.sh
timeout 150 python3 -m hyperloom.cli bench llama --config bench --scenarios decode --ctx 1024 \
    --no-compile-time --profile --json "$OUT/llama-decode.json" 2>&1 | tee "$OUT/llama_decode.log" \
    | grep -A30 "^decode b1" | head -40
timeout 100 python3 -m hyperloom.cli bench glm5next --config glm-5.3-flash --scenarios kda-layer \
    --no-compile --no-compile-time --profile --json "$OUT/kda-layer.json" 2>&1 \
    | tee "$OUT/kda_layer.log" | tail -40
