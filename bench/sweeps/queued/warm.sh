# The timing's warm-up (measure.WARM_S: each timed function first runs for 0.25 s) at HEAD
# against OLD's timing without it (the package as at that commit, unpacked under .whl/old:
# `git archive OLD hyperloom | tar -x -C .whl/old`): llama decode b1 and b16 and GLM-5.3-Flash's
# KDA layer, old and new in turns, a process each; then HEAD's llama decode against
# torch.compile. Run from the repository root with the wheels under .whl/; logs under $OUT.
set -u
OLD=${OLD:-6b4edbc}
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site2 .whl/transformers-*.whl
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site3 .whl/*.whl
nvidia-smi --query-gpu=name --format=csv,noheader
run() {  # run WHICH SITE ARGS...: the CLI of HEAD's package (new) or OLD's (old)
    local dir=. commit= site=$2 which=$1; shift 2
    if [ "$which" = old ]; then dir=.whl/old commit=$OLD; fi
    (cd "$dir" && HYPERLOOM_COMMIT=$commit PYTHONPATH=$site timeout 100 python3 -m hyperloom.cli "$@")
}
for round in 1 2; do
    for which in old new; do
        run $which /tmp/site2 bench llama --config bench --scenarios decode \
            --ctx 1024,16x1024 --no-compile --no-compile-time > "$OUT/llama_${which}${round}.log" 2>&1
        echo "llama $which $round rc=$?"; grep -E "^decode" "$OUT/llama_${which}${round}.log" | sort -u
    done
done
for which in old new; do
    run $which /tmp/site3 bench glm5next --config glm-5.3-flash --scenarios kda-layer \
        --no-compile --no-compile-time > "$OUT/kda_${which}.log" 2>&1
    echo "kda $which rc=$?"; grep -E "^kda|note" "$OUT/kda_${which}.log" | sort -u
done
PYTHONPATH=/tmp/site2 timeout 200 python3 -m hyperloom.cli bench llama --config bench \
    --scenarios decode --ctx 1024,16x1024 --no-compile-time --profile \
    --json "$OUT/llama.json" > "$OUT/llama.log" 2>&1
echo "llama vs torch.compile rc=$?"; grep -E "^decode|reduce-overhead|limits" "$OUT/llama.log" | sort -u
