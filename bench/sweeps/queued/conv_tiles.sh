# One device call (about 7 minutes). (1) KDA's tiled conv with the window run by run (106
# registers a thread on [32, 128] x 4 warps, against 216 when its 328 us at 2048 rows was
# measured) on the committed tile and four others, at GLM-5.3's width (bench/sweeps/kda_conv.py:
# prefill 256 and 2048 rows, decode b1 and b16, verify 4x4; a tile variant runs the tiled form
# on every shape). (2) The chunked KDA prefill at 2048 and 8192 tokens against fla, profiled,
# on mild and model-like decay inputs: in GLM-5.3-Flash's 2048-token prefill (7c05218) the
# in-chunk kernel took 475 us a layer, against 708 us for 8192 tokens on the mild inputs (the
# exact form of blocks past -64 from their start, likely; a9734c7 measures from the middle row).
# Run from the repository root with transformers' wheel on PYTHONPATH; logs under $OUT.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/fla .whl/fla/*.whl
PYTHONPATH=/tmp/fla:$PYTHONPATH timeout 330 python3 -m hyperloom.cli bench glm5next \
    --config glm-5.3-flash --scenarios kda-prefill --kda-tokens 2048,8192 --no-compile \
    --no-compile-time --profile --json "$OUT/kda-prefill.json" 2>&1 | tee "$OUT/kda_prefill.log"
cd bench/sweeps || exit 1
timeout 300 python3 kda_conv.py --rounds 2 committed tile:32x128x4 tile:64x128x4 \
    tile:32x256x4 tile:64x128x8 tile:16x128x4 2>&1 | tee "$OUT/conv_tiles.log"
