# One device call (about 7 minutes): the MLA attention walking only a row's live index columns
# (4a0379f) and a long run's rows below topk in the dense form: the DSA and MLA bf16 GPU tests
# (their prompt chunks of 1024 rows take the dense form), GLM-5.3-Flash's 4-layer prefill
# (eager baseline, profiled: the MLA kernel took 8.0 ms of 26.9 at 7c05218, every row in the
# split form; now all 2048 rows are dense) and decode b1 at 1024 tokens, the DSA decode layer
# at 4K (every column live: must not slow down), then the prefill against torch.compile's
# default mode with what time is left. Run from the repository root with
# transformers' wheel on PYTHONPATH; logs under $OUT.
end=$(( $(date +%s) + ${BUDGET:-480} ))
left() { echo $(( end - $(date +%s) )); }
timeout 120 python3 -m pytest -p no:xdist -o addopts=-ra -m gpu tests/codegen/test_dsa.py -q \
    2>&1 | tee "$OUT/dsa_gpu_tests.log"
glm() {  # NAME ARGS...
    local name=$1
    shift
    [ "$(left)" -gt 60 ] || { echo "glm $name: no time left" | tee "$OUT/glm_$name.log"; return; }
    timeout "$(left)" python3 -m hyperloom.cli bench glm5next --config glm-5.3-flash \
        --no-compile-time --json "$OUT/glm-$name.json" "$@" 2>&1 | grep -v Warning \
        | tee "$OUT/glm_$name.log"
}
glm prefill-eager --layers 4 --scenarios prefill --no-compile --profile
glm decode --layers 4 --scenarios decode --ctx 1024 --no-compile --profile
glm dsa --scenarios dsa-decode --dsa-ctx 4096 --no-compile --profile
glm prefill-default --layers 4 --scenarios prefill --prefill-modes default
