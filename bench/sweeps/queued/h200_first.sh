# Items 2, 4 and 1 of this folder's README in one device call (about 8 minutes): issue 4's llama
# decode and site against torch.compile, issue 6's KDA layer, the TMA projection sweep, then the
# real-width GLM test (transformers' wheel alone on PYTHONPATH), each in its own process, the
# targets first. Run from the repository root with the wheels under .whl/ and the commit's
# short hash in .whl/commit (records name it: the copy on the device has no git); logs and
# records under $OUT (7 files). `h200_first.sh targets` stops before the GLM test (about 4
# minutes).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site2 .whl/transformers-*.whl
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site3 .whl/*.whl
nvidia-smi --query-gpu=name --format=csv,noheader
export HYPERLOOM_COMMIT=$(cat .whl/commit)
PYTHONPATH=/tmp/site2 timeout 240 python3 -m hyperloom.cli bench llama --config bench \
    --scenarios decode,site --ctx 1024,16x1024 --site-rows 4096 --no-compile-time --profile \
    --json "$OUT/llama.json" > "$OUT/llama.log" 2>&1
echo "llama rc=$?"; grep -E "^(decode|mhc)|reduce-overhead|default|limits|target" "$OUT/llama.log" | sort -u
PYTHONPATH=/tmp/site3 timeout 100 python3 -m hyperloom.cli bench glm5next --config glm-5.3-flash \
    --scenarios kda-layer --no-compile --no-compile-time --profile \
    --json "$OUT/kda_layer.json" > "$OUT/kda_layer.log" 2>&1
echo "kda layer rc=$?"; grep -E "^kda|limits|note" "$OUT/kda_layer.log" | sort -u
PYTHONPATH=.:/tmp/site2 timeout 100 python3 bench/sweeps/hc_proj_tma.py > "$OUT/tma.log" 2>&1
echo "tma rc=$?"; tail -12 "$OUT/tma.log"
[ "${1:-all}" = targets ] && exit 0
PYTHONPATH=/tmp/site2 timeout 280 python3 -m pytest -m gpu -s -q -o addopts= -p no:cacheprovider \
    tests/e2e/test_glm_flash_gpu.py > "$OUT/glm_test.log" 2>&1
echo "glm test rc=$?"; grep -E "rows,|passed|failed" "$OUT/glm_test.log" | grep -v " 1 rows" | cut -c1-240
