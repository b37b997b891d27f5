# One device call (about 4 minutes): llama bench's decode at one row with the formed sites'
# GEMVs taking the streams' lo parts beside their hi parts (site_lo_parts, the default) and the
# hi parts alone, twice each (at 3c36ac2 the forming gate_up ran 2.5 us a call slower than the
# plain one: 8 A rows and 10 KB of partials a program), then the GPU tests of the finishing fold
# and the hi-only form. Run from the repository root with transformers' wheel on PYTHONPATH;
# logs under $OUT.
for v in true false true false; do
    timeout 80 python3 -m hyperloom.cli --set site_lo_parts=$v bench llama --config bench \
        --scenarios decode --ctx 1024 --no-compile --no-compile-time --profile \
        --json "$OUT/llama-lo-$v.json" 2>&1 | grep -A8 "^decode b1" | head -9 \
        | tee -a "$OUT/lo_parts.log"
done
timeout 100 python3 -m pytest -p no:xdist -o addopts=-ra -m gpu -q \
    tests/runtime/test_compiled_gpu.py -k "other_site_forms" 2>&1 | tail -3 | tee "$OUT/tests.log"
