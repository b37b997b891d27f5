# Queue item 1: the transposed KDA state (301b954) on a GPU. The GPU tests with transformers'
# wheel alone on the path, then the KDA bench scenarios with fla's wheels. Run from the
# repository root; `.whl/` holds the wheels, logs go under $OUT.
set -u
pip install -q --no-deps --target /tmp/site2 .whl/transformers-*.whl > /dev/null 2>&1
pip install -q --no-deps --target /tmp/site3 .whl/*.whl > /dev/null 2>&1
export HYPERLOOM_COMMIT=$(cat .whl/commit)
PYTHONPATH=/tmp/site2 timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider -o addopts= -n 4 --dist loadfile \
    tests/codegen/test_kda.py tests/codegen/test_kda_chunk.py tests/runtime/test_compiled_gpu.py \
    2>&1 | tail -15 | tee "$OUT/kda_state_tests.log"
PYTHONPATH=/tmp/site2 timeout 200 python3 -m pytest -q -m gpu -s -p no:cacheprovider -o addopts= \
    tests/e2e/test_glm_flash_gpu.py 2>&1 | tail -25 | tee "$OUT/glm_flash_gpu.log"
PYTHONPATH=/tmp/site3 timeout 150 python3 -m hyperloom.cli bench glm5next --config glm-5.3-flash \
    --scenarios kda-decode,kda-layer --no-compile --no-compile-time --profile \
    --json "$OUT/kda.json" 2>&1 | tail -60 | tee "$OUT/kda_bench.log"
