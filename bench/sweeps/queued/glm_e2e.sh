# One device call (about 8 minutes): GLM-5.3-Flash's first 4 layers end to end against their
# PyTorch baseline (bench/baseline_{kda,dsa,moe}.py, never yet run on a GPU): decode at batch 1
# and 16 over 1024 tokens and a 2048-token prefill, eager first (fast; its JSON survives a
# timeout), then torch.compile's modes. Run from the repository root with transformers' wheel
# on PYTHONPATH; logs under $OUT.
timeout 240 python3 -m hyperloom.cli bench glm5next --config glm-5.3-flash --layers 4 \
    --scenarios decode,prefill --ctx 1024,16x1024 --no-compile --no-compile-time --profile \
    --json "$OUT/glm-e2e-eager.json" 2>&1 | tee "$OUT/glm_e2e_eager.log"
timeout 300 python3 -m hyperloom.cli bench glm5next --config glm-5.3-flash --layers 4 \
    --scenarios decode,prefill --ctx 1024 --no-compile-time \
    --json "$OUT/glm-e2e.json" 2>&1 | tee "$OUT/glm_e2e.log"
