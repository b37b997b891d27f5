# One device call (about 8 minutes): the bf16 GPU tests of hc_pre (the sweep among them), the
# compiled engines and the matmuls; then llama bench's mHC site at 4096 rows with hc_pre's wide
# step as three launches (hc_sweep_splits=0, against torch.compile's default mode) and as the
# sweep at 4, 8 and 16 K splits a row block; llama prefill of 2048 tokens with and without it.
# Run from the repository root with transformers' wheel on PYTHONPATH; logs under $OUT.
timeout 280 python3 -m pytest -p no:xdist -o addopts=-ra -m gpu -q tests/codegen/test_hc_pre.py \
    tests/runtime/test_compiled_gpu.py tests/codegen/test_matmul.py 2>&1 | tail -12 \
    | tee "$OUT/tests.log"
for s in 0 4 8 16; do
    base=$([ "$s" = 0 ] || echo --no-compile)
    timeout 150 python3 -m hyperloom.cli --set hc_sweep_splits=$s bench llama --config bench \
        --scenarios site --site-rows 4096 --no-compile-time --profile $base \
        --json "$OUT/site-$s.json" 2>&1 | grep -A7 "^mhc site" | head -8 | tee -a "$OUT/site.log"
done
for s in 0 8; do
    timeout 120 python3 -m hyperloom.cli --set hc_sweep_splits=$s bench llama --config bench \
        --scenarios prefill --no-compile --no-compile-time --profile 2>&1 \
        | grep -A10 "^prefill" | head -11 | tee -a "$OUT/prefill.log"
done
