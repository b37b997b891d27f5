# GLM-5.3-Flash's first 4 layers end to end against their PyTorch baseline, decode at b1 and
# b16 over 1024 tokens, torch.compile reduce-overhead beside eager (ran on the H100 at 5f75deb;
# wants an H200). The prefill against max-autotune-no-cudagraphs does not fit a 10-minute
# call: its autotuning alone ran 580 s at 9bdab83. Run from the repository root with
# transformers' wheel on PYTHONPATH; logs under $OUT.
run() {  # NAME SECONDS ARGS...
    local name=$1 limit=$2
    shift 2
    timeout "$limit" python3 -m hyperloom.cli bench glm5next --config glm-5.3-flash --layers 4 \
        --no-compile-time --json "$OUT/glm-$name.json" "$@" 2>&1 | tee "$OUT/glm_$name.log"
}
case "$1" in
    decode) run decode 560 --scenarios decode --ctx 1024,16x1024 --profile ;;
    *) echo "usage: glm_e2e.sh decode" >&2; exit 2 ;;
esac
