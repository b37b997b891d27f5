# The one-row GEMVs' 256-deep K steps (HEAD) against 128-deep ones (OLD, the package as at that
# commit, unpacked under .whl/old: `git archive OLD hyperloom | tar -x -C .whl/old`), in one
# device call: the GEMV sweep over the old per-shape tilings and the new, then llama decode b1
# and b16 and GLM-5.3-Flash's KDA layer, old and new in turns, a process each. Run from the
# repository root with the wheels under .whl/; logs under $OUT (7 files).
set -u
OLD=${OLD:-6b4edbc}
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site2 .whl/transformers-*.whl
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site3 .whl/*.whl
nvidia-smi --query-gpu=name --format=csv,noheader
PYTHONPATH=.:/tmp/site2 timeout 150 python3 bench/sweeps/gemv.py --rounds 2 committed \
    32,8,4,128 64,6,4,128 64,4,4,128 32,6,4,256 > "$OUT/gemv.log" 2>&1
echo "gemv rc=$?"; grep -v " err " "$OUT/gemv.log" | tail -45
run() {  # run WHICH SITE ARGS...: the CLI of HEAD's package (new) or OLD's (old)
    local dir=. commit= site=$2 which=$1; shift 2
    if [ "$which" = old ]; then dir=.whl/old commit=$OLD; fi
    (cd "$dir" && HYPERLOOM_COMMIT=$commit PYTHONPATH=$site timeout 100 python3 -m hyperloom.cli "$@")
}
for round in 1 2; do
    for which in old new; do
        run $which /tmp/site2 bench llama --config bench --scenarios decode \
            --ctx 1024,16x1024 --no-compile --no-compile-time --profile \
            > "$OUT/llama_${which}${round}.log" 2>&1
        echo "llama $which $round rc=$?"; grep -E "^decode" "$OUT/llama_${which}${round}.log"
    done
done
for which in old new; do
    run $which /tmp/site3 bench glm5next --config glm-5.3-flash --scenarios kda-layer \
        --no-compile --no-compile-time --profile > "$OUT/kda_${which}.log" 2>&1
    echo "kda $which rc=$?"; grep -E "^kda|note" "$OUT/kda_${which}.log"
done
