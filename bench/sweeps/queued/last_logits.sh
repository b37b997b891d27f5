# Queue item 3 in one device call (about 3 minutes): the bf16 last-logits test, then the
# 2048-token GLM-5.3-Flash prefill timed with every row's logits and with the last row's.
# Run from the repository root with the wheels under .whl/; logs under $OUT (2 files).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site2 .whl/transformers-*.whl
nvidia-smi --query-gpu=name --format=csv,noheader
PYTHONPATH=/tmp/site2 timeout 200 python3 -m pytest -m gpu -q -o addopts= -p no:cacheprovider \
    tests/runtime/test_compiled_gpu.py -k last_logits > "$OUT/last_logits_test.log" 2>&1
echo "last-logits test rc=$?"; tail -3 "$OUT/last_logits_test.log"
PYTHONPATH=/tmp/site2:. timeout 200 python3 bench/sweeps/queued/last_logits.py 2048 \
    > "$OUT/last_logits_time.log" 2>&1
echo "timing rc=$?"; tail -2 "$OUT/last_logits_time.log"
