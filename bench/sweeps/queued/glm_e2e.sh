# One device call (about 8 minutes): GLM-5.3-Flash's first 4 layers end to end against their
# PyTorch baseline (hyperloom/bench/baseline_{kda,dsa,moe}.py, not yet run on a GPU): decode
# at batch 1 and 16 over 1024 tokens and a 2048-token prefill, eager first, then torch.compile's
# modes. One command a scenario, so a failed agreement check stops only its own; each writes
# its JSON as it goes. Run from the repository root with transformers' wheel on PYTHONPATH;
# logs under $OUT.
run() {  # NAME SECONDS ARGS...
    local name=$1 limit=$2
    shift 2
    timeout "$limit" python3 -m hyperloom.cli bench glm5next --config glm-5.3-flash --layers 4 \
        --no-compile-time --json "$OUT/glm-$name.json" "$@" 2>&1 | tee "$OUT/glm_$name.log"
}
run decode-eager 120 --scenarios decode --ctx 1024,16x1024 --no-compile --profile
run prefill-eager 90 --scenarios prefill --no-compile --profile
run decode 120 --scenarios decode --ctx 1024
run prefill 150 --scenarios prefill
