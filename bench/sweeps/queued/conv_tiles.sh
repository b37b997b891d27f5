# One device call (under 10 minutes): the KDA conv's row tiles (the 32-row tile of 6f10e08 took
# the KDA layer's decode from 2.3 to 8.7 us at batch 1 and to 30.5 us at batch 16; steps of up
# to 64 rows now take an 8-row tile), then GLM-5.3-Flash's first whole-step numbers. Run from
# the repository root with transformers' wheel on PYTHONPATH (not fla's: transformers would
# take its kernels); logs under $OUT. Each stage gets what is left of a 560 s budget.
end=$(( $(date +%s) + 560 ))
left() { echo $(( end - $(date +%s) )); }
timeout 150 python3 -m pytest -p no:xdist -o addopts=-ra -m gpu tests/codegen/test_kda.py -q \
    2>&1 | tee "$OUT/kda_gpu_tests.log"
(cd bench/sweeps && timeout 110 python3 kda_conv.py --rounds 2 committed tile:8x128x4 \
    tile:16x128x4 tile:32x128x4 tile:8x64x4 tile:16x128x8 queued/conv_serial.py 2>&1 \
    | tee "$OUT/conv_sweep.log")
timeout 100 python3 -m hyperloom.cli bench glm5next --config glm-5.3-flash --scenarios kda-layer \
    --no-compile --no-compile-time --profile --json "$OUT/kda-layer.json" 2>&1 \
    | tee "$OUT/kda_layer.log"
timeout "$(left)" python3 -m hyperloom.cli bench glm5next --config glm-5.3-flash --layers 4 \
    --no-compile-time --no-compile --profile --scenarios decode,prefill --ctx 1024 \
    --json "$OUT/glm-eager.json" 2>&1 | tee "$OUT/glm_eager.log"
