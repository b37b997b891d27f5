# The queued MoE sweeps (issue 8), one device call of about 4 minutes: run from the repository
# root with transformers' wheel on PYTHONPATH; logs go under $OUT. (Eviction hints on the
# grouped GEMMs' loads were dropped from the queue: Triton 3.6 lowers those pipelined loads to
# cp.async.cg without an L2 cache policy, so the hint does not reach the sm_90 code.)
cd bench/sweeps || exit 1
Q=queued/moe
timeout 200 python3 moe_experts.py 4096 --rounds 3 --router committed $Q/router_bn32.py \
    $Q/router_bn32w8.py $Q/router_s8.py $Q/router_bm64.py 2>&1 | tee "$OUT/moe_router.log"
timeout 300 python3 moe_experts.py 4096 --rounds 3 committed $Q/experts_bk128.py \
    $Q/experts_g4.py $Q/experts_diag_nox.py $Q/experts_diag_now.py 2>&1 \
    | tee "$OUT/moe_experts.log"
