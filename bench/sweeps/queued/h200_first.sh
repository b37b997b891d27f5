# Items 1 and 2 of this folder's README in one device call (about 8 minutes on an H100): the
# real-width GLM test with transformers' wheel alone on PYTHONPATH, then issue 4's llama decode
# and site and issue 6's KDA layer, each in its own process. Run from the repository root with
# the wheels under .whl/; logs and records under $OUT (6 files).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site2 .whl/transformers-*.whl
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site3 .whl/*.whl
nvidia-smi --query-gpu=name --format=csv,noheader
PYTHONPATH=/tmp/site2 timeout 300 python3 -m pytest -m gpu -s -q -o addopts= -p no:cacheprovider \
    tests/e2e/test_glm_flash_gpu.py > "$OUT/glm_test.log" 2>&1
echo "glm test rc=$?"; grep -E "rows,|passed|failed" "$OUT/glm_test.log" | grep -v " 1 rows" | cut -c1-240
PYTHONPATH=/tmp/site2 timeout 200 python3 -m hyperloom.cli bench llama --config bench \
    --scenarios decode,site --ctx 1024,16x1024 --site-rows 4096 --no-compile-time --profile \
    --json "$OUT/llama.json" > "$OUT/llama.log" 2>&1
echo "llama rc=$?"; grep -E "^(decode|mhc)|reduce-overhead|default|limits" "$OUT/llama.log" | tail -6
PYTHONPATH=/tmp/site3 timeout 100 python3 -m hyperloom.cli bench glm5next --config glm-5.3-flash \
    --scenarios kda-layer --no-compile --no-compile-time --profile \
    --json "$OUT/kda_layer.json" > "$OUT/kda_layer.log" 2>&1
echo "kda layer rc=$?"; grep -E "^kda|limits" "$OUT/kda_layer.log" | tail -4
