# One device call (about 5 minutes): (1) llama bench's mHC site at 4096 rows with the apply
# kernel's row loads evict-first (hc_apply_evict), against torch.compile's default mode, and
# without the hint (issue 4's 5x needs 0.295 ms; 0.306 at 127ef38: proj 73 + apply 78 + gates
# 6.5 + hc_post 147 us); (2) llama bench's decode at one row with the formed sites' GEMVs taking
# the streams' lo parts beside their hi parts (site_lo_parts, the default) and the hi parts
# alone (at 3c36ac2 the forming gate_up ran 2.5 us a call slower than the plain one; since then
# the first site runs hc_pre's parts kernel, not its fused finish, 9.3 us at 3c36ac2); (3) the
# GPU tests of the finishing fold and the hi-only form. Run from the repository root with
# transformers' wheel on PYTHONPATH; logs under $OUT.
site() {  # KNOB=VALUE ARGS...
    timeout 150 python3 -m hyperloom.cli --set "$1" bench llama --config bench --scenarios site \
        --site-rows 4096 --no-compile-time --profile --json "$OUT/site-${1#*=}.json" "${@:2}" \
        2>&1 | grep -i -A7 "^mhc site" | tee -a "$OUT/site.log"
}
site hc_apply_evict=true
site hc_apply_evict=false --no-compile
for v in false true; do
    timeout 80 python3 -m hyperloom.cli --set site_lo_parts=$v bench llama --config bench \
        --scenarios decode --ctx 1024 --no-compile --no-compile-time --profile \
        --json "$OUT/llama-lo-$v.json" 2>&1 | grep -A8 "^decode b1" | head -9 \
        | tee -a "$OUT/lo_parts.log"
done
timeout 100 python3 -m pytest -p no:xdist -o addopts=-ra -m gpu -q \
    tests/runtime/test_compiled_gpu.py -k "other_site_forms" 2>&1 | tail -3 | tee "$OUT/tests.log"
