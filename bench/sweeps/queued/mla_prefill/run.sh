# One device call (about 5 minutes): the MLA attention over GLM-5.3-Flash prefills of 2048 and
# 8192 tokens (bench/sweeps/mla_prefill.py): the committed launch (rows below topk dense) against
# the split form alone (split.py: every row through the index, the form before), three dense
# tilings (M 64, 64 tokens an iteration, 4 warps), the dense scores as a transposed product, and
# two split-form tilings for the 8192-token prompt's rows past topk (64 entries an iteration, 16
# heads a program). Run from the repository root with transformers' wheel on PYTHONPATH; logs
# under $OUT.
cd bench/sweeps || exit 1
q=queued/mla_prefill
timeout 560 python3 mla_prefill.py --rounds 2 committed $q/split.py $q/dense_m64.py \
    $q/dense_bn64.py $q/dense_w4.py $q/dense_qt.py $q/bn64.py $q/bh16.py 2>&1 \
    | tee "$OUT/mla_prefill.log"
