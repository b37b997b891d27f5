# One device call (about 5 minutes): the MLA over GLM-5.3-Flash prefills of 2048 and 8192
# tokens (bench/sweeps/mla_prefill.py: latent write + absorb, attention, merge): the committed
# launch (rows below topk dense; absorb and merge on 256-column blocks; 64 heads a split-form
# program in wide steps) against the split form alone (split.py: every row through the index,
# as before), dense tilings (M 64, 64 tokens an iteration), the dense scores as a transposed
# product, absorb and merge on 64 (as before) and 128 columns, and 32 heads a split-form
# program (as before; the 8192-token prompt's rows past topk). Run from the repository root
# with transformers' wheel on PYTHONPATH; logs under $OUT.
cd bench/sweeps || exit 1
q=queued/mla_prefill
timeout 560 python3 mla_prefill.py --rounds 2 committed $q/split.py $q/dense_m64.py \
    $q/dense_bn64.py $q/dense_qt.py $q/cols64.py $q/cols128.py $q/bh32.py 2>&1 \
    | tee "$OUT/mla_prefill.log"
