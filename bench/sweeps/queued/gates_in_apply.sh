# One device call (about 6 minutes): hc_pre's wide gates as the apply launch's first programs
# (hc_gates_in_apply) against after it. First the bf16 GPU tests of hc_pre (both forms), then
# llama bench's mHC site at 4096 rows (off: against torch.compile's default mode; on:
# --no-compile) and its prefill of 2048 tokens each way. Issue 4's site needs 0.295 ms on the
# H200 (0.306 at 127ef38: proj 73 + apply 78 + gates 6.5 + hc_post 147 us). Run from the
# repository root with transformers' wheel on PYTHONPATH; logs under $OUT (4 files).
timeout 200 python3 -m pytest -p no:xdist -o addopts=-ra -m gpu -q tests/codegen/test_hc_pre.py \
    2>&1 | tail -4 | tee "$OUT/tests.log"
for v in false true; do
    base=$([ "$v" = false ] || echo --no-compile)
    timeout 150 python3 -m hyperloom.cli --set hc_gates_in_apply=$v bench llama --config bench \
        --scenarios site --site-rows 4096 --no-compile-time --profile $base \
        --json "$OUT/site-$v.json" 2>&1 | grep -A8 "^mhc site" | head -9 | tee -a "$OUT/site.log"
done
[ -n "$SITE_ONLY" ] && exit 0  # SITE_ONLY=1: the tests and the site alone
for v in false true; do
    timeout 100 python3 -m hyperloom.cli --set hc_gates_in_apply=$v bench llama --config bench \
        --scenarios prefill --no-compile --no-compile-time --profile 2>&1 \
        | grep -A10 "^prefill" | head -11 | tee -a "$OUT/prefill.log"
done
