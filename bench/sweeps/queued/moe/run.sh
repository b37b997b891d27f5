# One device call (about 3 minutes): the routed experts' prefill at GLM-5.3-Flash's size, 4096
# rows, with the weight tiles loaded by TMA (4-D and 2-D descriptors) against the committed
# loads; each variant's output is checked against the committed kernels' and the torch loop's
# first. Issue 8: 50% of the matmul peak needs about 4.1 ms for the step. Logs under $OUT.
d=bench/sweeps/queued/moe
timeout 400 python3 bench/sweeps/moe_experts.py 4096 --rounds 3 committed $d/tma.py \
    $d/tma_flat.py 2>&1 | tail -12 | tee "$OUT/moe.log"
