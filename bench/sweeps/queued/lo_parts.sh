# One device call (about 4 minutes): formed sites with and without the lo parts (site_lo_parts), twice each, and their GPU tests; logs under $OUT.
. .whl/pre.sh
timeout 100 python3 -m pytest -p no:xdist -o addopts=-ra -m gpu -q tests/runtime/test_compiled_gpu.py -k "other_site_forms" 2>&1 | tail -3 | tee $OUT/tests.log
for v in true false true false; do
  timeout 80 python3 -m hyperloom.cli --set site_lo_parts=$v bench llama --config bench --scenarios decode --ctx 1024 --no-compile --no-compile-time --profile --json $OUT/llama-lo-$v.json 2>&1 | grep -A8 "^decode b1" | head -9
done
