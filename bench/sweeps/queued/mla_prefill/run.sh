# One device call (about 4 minutes): the MLA attention over GLM-5.3-Flash prefills of 2048 and
# 8192 tokens (bench/sweeps/mla_prefill.py), the committed launch against four tilings. Run from
# the repository root with transformers' wheel on PYTHONPATH; logs under $OUT.
cd bench/sweeps || exit 1
q=queued/mla_prefill
timeout 500 python3 mla_prefill.py --rounds 2 committed $q/warps4.py $q/bn64.py $q/bh16.py \
    $q/stages2.py 2>&1 | tee "$OUT/mla_prefill.log"
