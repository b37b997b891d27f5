# One device call (about 5 minutes) for the parallel KDA conv (6f10e08, not yet run on a GPU):
# its bf16 GPU tests and GLM-5.3-Flash's 4-layer tests, the conv against its serial form at the
# engine's step shapes, and a KDA site's decode step. Run from the repository root with
# transformers' wheel on PYTHONPATH; logs under $OUT. Then delete queued/conv_serial.py.
timeout 240 python3 -m pytest -p no:xdist -o addopts=-ra -m gpu tests/codegen/test_kda.py \
    tests/e2e/test_glm_flash_gpu.py -q 2>&1 | tee "$OUT/conv_gpu_tests.log"
(cd bench/sweeps && timeout 120 python3 kda_conv.py --rounds 2 committed \
    queued/conv_serial.py 2>&1 | tee "$OUT/conv_sweep.log")
timeout 200 python3 -m hyperloom.cli bench glm5next --config glm-5.3-flash --scenarios kda-layer \
    --no-compile --no-compile-time --profile --json "$OUT/kda-layer.json" 2>&1 \
    | tee "$OUT/kda_layer.log"
