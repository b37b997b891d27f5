# GLM-5.3-Flash's first 4 layers end to end against their PyTorch baseline, one device call a
# scenario: `bash glm_e2e.sh decode` (b1 and b16 over 1024 tokens, torch.compile
# reduce-overhead beside eager; both ran at 7c05218) and `bash glm_e2e.sh prefill` (2048
# tokens against max-autotune-no-cudagraphs alone: beside the default mode its autotuning did
# not finish in 10 minutes). Run from the repository root with transformers' wheel on
# PYTHONPATH; logs under $OUT.
run() {  # NAME SECONDS ARGS...
    local name=$1 limit=$2
    shift 2
    timeout "$limit" python3 -m hyperloom.cli bench glm5next --config glm-5.3-flash --layers 4 \
        --no-compile-time --json "$OUT/glm-$name.json" "$@" 2>&1 | tee "$OUT/glm_$name.log"
}
case "$1" in
    decode) run decode 560 --scenarios decode --ctx 1024,16x1024 --profile ;;
    prefill) run prefill 580 --scenarios prefill --prefill-modes max-autotune-no-cudagraphs ;;
    *) echo "usage: glm_e2e.sh decode|prefill" >&2; exit 2 ;;
esac
