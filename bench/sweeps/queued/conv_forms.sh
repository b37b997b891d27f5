# One device call (about 7 minutes): the KDA conv's two forms (decode and verify steps walk each
# run; prefill steps take the 32-row tile), its bf16 GPU tests and the KDA layer's decode, then
# GLM-5.3-Flash's 4-layer prefill against its baseline under the bench's pair rule, and its
# decode under torch.compile with what time is left. Run from the repository root with
# transformers' wheel on PYTHONPATH (not fla's: transformers would take its kernels); logs
# under $OUT.
end=$(( $(date +%s) + ${BUDGET:-400} ))
left() { echo $(( end - $(date +%s) )); }
timeout 60 python3 -m pytest -p no:xdist -o addopts=-ra -m gpu tests/codegen/test_kda.py -q \
    2>&1 | tee "$OUT/kda_gpu_tests.log"
(cd bench/sweeps && timeout 60 python3 kda_conv.py --rounds 1 committed runs tile:32x128x4 \
    2>&1 | tee "$OUT/conv_sweep.log")
timeout 80 python3 -m hyperloom.cli bench glm5next --config glm-5.3-flash --scenarios kda-layer \
    --no-compile --no-compile-time --profile --json "$OUT/kda-layer.json" 2>&1 \
    | tee "$OUT/kda_layer.log"
glm() {  # NAME ARGS...
    local name=$1
    shift
    [ "$(left)" -gt 60 ] || { echo "glm $name: no time left" | tee "$OUT/glm_$name.log"; return; }
    timeout "$(left)" python3 -m hyperloom.cli bench glm5next --config glm-5.3-flash --layers 4 \
        --no-compile-time --json "$OUT/glm-$name.json" "$@" 2>&1 | tee "$OUT/glm_$name.log"
}
glm prefill-eager --scenarios prefill --no-compile --profile
glm decode --scenarios decode --ctx 1024
