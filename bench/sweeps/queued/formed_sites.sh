# One device call (about 8 minutes): the formed sites (form_sites: the GEMV after a folded mHC
# site forms its y at one row from the streams' parts, and the GEMM before writes partials only,
# with no ticket and no finish). The bf16 GPU tests of the compiled engines (llama tiny, tiny-hc
# and bench, GLM tiny: their decode forms every llama site and GLM's dense and KDA sites), hc_pre
# and the matmul GEMVs; then llama bench's decode at one row over 1024 tokens, profiled, formed
# (against torch.compile reduce-overhead: issue 4's 2.5x needs 0.497 ms; 0.560 at 127ef38) and
# with the finishing fold (form_sites=false, eager baseline only); then GLM-5.3-Flash's 4-layer
# decode formed (1.087 ms at d8e231b). Run from the repository root with transformers' wheel on
# PYTHONPATH; logs under $OUT.
end=$(( $(date +%s) + ${BUDGET:-560} ))
left() { echo $(( end - $(date +%s) )); }
step() {  # NAME SECONDS COMMAND...: runs while its seconds are left
    local name=$1 need=$2
    shift 2
    [ "$(left)" -gt "$need" ] || { echo "$name: no time left" | tee "$OUT/$name.log"; return; }
    timeout "$(left)" "$@" 2>&1 | grep -v Warning | tee "$OUT/$name.log"
}
step gpu_tests 60 timeout ${TESTS_S:-220} python3 -m pytest -p no:xdist -o addopts=-ra -m gpu -q \
    ${TESTS:-tests/runtime/test_compiled_gpu.py tests/codegen/test_hc_pre.py tests/codegen/test_matmul.py}
step llama_formed 120 python3 -m hyperloom.cli bench llama --config bench --scenarios decode \
    --ctx 1024 --no-compile-time --profile --json "$OUT/llama-decode-formed.json"
step llama_finished 60 python3 -m hyperloom.cli --set form_sites=false bench llama --config bench \
    --scenarios decode --ctx 1024 --no-compile --no-compile-time --profile \
    --json "$OUT/llama-decode-finished.json"
step glm_formed 60 python3 -m hyperloom.cli bench glm5next --config glm-5.3-flash --layers 4 \
    --scenarios decode --ctx 1024 --no-compile --no-compile-time --profile \
    --json "$OUT/glm-decode-formed.json"
