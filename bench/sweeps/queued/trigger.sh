# pdl_trigger A/B (the next grid's launch trigger after the decode GEMVs' and the split
# attention's main loops) beside HEAD's H200 runs, one device call a stage, from the repository
# root with the wheels on PYTHONPATH (`kda-layer` wants fla); logs and records under $OUT.
#   bash trigger.sh llama: bench decode + site against torch.compile at the defaults, then
#                          decode with the trigger (eager baseline only)
#   bash trigger.sh kda:   the KDA layer off / on, llama decode at the defaults again, then the
#                          engines' GPU tests for what is left of the call
#   bash trigger.sh tests: the engines' GPU tests (runtime, e2e, ir, models)
bench() {  # NAME SECONDS ARGS... (knobs first: --set K=V)
    local name=$1 limit=$2
    shift 2
    timeout "$limit" python3 -m hyperloom.cli "$@" --no-compile-time --profile \
        --json "$OUT/$name.json" > "$OUT/$name.log" 2>&1
    echo "== $name rc=$?"
    grep -B2 -A14 -E "^(decode|site|kda)" "$OUT/$name.log" | head -60
}
tests() {  # SECONDS: transformers' wheel alone on the path (test_glm_flash_gpu refuses fla)
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site2 \
        .whl/transformers-*.whl
    PYTHONPATH=/tmp/site2 timeout "$1" python3 -m pytest -p no:xdist -o addopts=-ra -m gpu -q \
        tests/runtime tests/e2e tests/ir tests/models 2>&1 | tail -25 | tee "$OUT/tests.log"
}
case "$1" in
    llama)
        bench llama 300 bench llama --config bench --scenarios decode,site --ctx 1024 \
            --site-rows 4096
        bench llama-trigger 120 --set pdl_trigger=true bench llama --config bench \
            --scenarios decode --ctx 1024 --no-compile ;;
    kda)
        bench kda 120 bench glm5next --config glm-5.3-flash --scenarios kda-layer --no-compile
        bench kda-trigger 120 --set pdl_trigger=true bench glm5next --config glm-5.3-flash \
            --scenarios kda-layer --no-compile
        bench llama-again 100 bench llama --config bench --scenarios decode --ctx 1024 \
            --no-compile
        tests 150 ;;
    tests) tests 560 ;;
    *) echo "usage: trigger.sh llama|kda|tests" >&2; exit 2 ;;
esac
