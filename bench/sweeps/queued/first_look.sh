# One device call (up to BUDGET seconds, default 560) for a session that may get only one: the
# bf16 GPU tests of the tenth and eleventh sessions' kernels (DSA/MLA with the dense form, KDA
# conv with the carried gate, chunked KDA, the recurrence with its carried norm, two norms in one
# launch, hc_pre with the norm weight, the compiled engines), then GLM-5.3-Flash's 4-layer
# prefill profiled (eager baseline), the MLA over a 2048-token prefill dense against split, and
# one KDA layer's decode with both carries, neither, and the gate alone, each while time is
# left. Run from the repository root with transformers' wheel on PYTHONPATH; logs under $OUT.
end=$(( $(date +%s) + ${BUDGET:-560} ))
left() { echo $(( end - $(date +%s) )); }
step() {  # NAME SECONDS COMMAND...: runs while its seconds are left
    local name=$1 need=$2
    shift 2
    [ "$(left)" -gt "$need" ] || { echo "$name: no time left" | tee "$OUT/$name.log"; return; }
    timeout "$(left)" "$@" 2>&1 | grep -v Warning | tee "$OUT/$name.log"
}
step gpu_tests 60 timeout 240 python3 -m pytest -p no:xdist -o addopts=-ra -m gpu -q \
    tests/codegen/test_dsa.py tests/codegen/test_kda.py tests/codegen/test_kda_chunk.py \
    tests/codegen/test_norm.py tests/codegen/test_hc_pre.py tests/runtime/test_compiled_gpu.py
step glm_prefill 90 python3 -m hyperloom.cli bench glm5next --config glm-5.3-flash --layers 4 \
    --no-compile-time --json "$OUT/glm-prefill-eager.json" --scenarios prefill --no-compile \
    --profile
(cd bench/sweeps && step mla_prefill 60 python3 mla_prefill.py --tokens 2048 --rounds 1 \
    committed queued/mla_prefill/split.py)
for knobs in "conv_gate=true kda_norm_rows=16" "conv_gate=false kda_norm_rows=0" \
        "conv_gate=true kda_norm_rows=0"; do
    set -- $knobs
    tag="${1#*=}-${2#*=}"
    step "kda_layer_$tag" 40 python3 -m hyperloom.cli --set "$1" --set "$2" bench \
        glm5next --config glm-5.3-flash --scenarios kda-layer --no-compile --no-compile-time \
        --profile --json "$OUT/kda-layer-$tag.json"
done
