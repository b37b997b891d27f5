# One device call (about 3 minutes): KDA's tiled conv with the window run by run (106 registers a
# thread on [32, 128] x 4 warps, against 216 when its 328 us at 2048 rows was measured) on the
# committed tile and four others, at GLM-5.3's width (bench/sweeps/kda_conv.py: prefill 256 and
# 2048 rows, decode b1 and b16, verify 4x4; a tile variant runs the tiled form on every shape).
# Run from the repository root with transformers' wheel on PYTHONPATH; logs under $OUT.
cd bench/sweeps || exit 1
timeout 300 python3 kda_conv.py --rounds 2 committed tile:32x128x4 tile:64x128x4 \
    tile:32x256x4 tile:64x128x8 tile:16x128x4 2>&1 | tee "$OUT/conv_tiles.log"
