# GEMV tilings at the decode shapes (issue 4: llama's o + hc_post + site kernel is 77 us for 4
# layers against a 32 us byte floor, down's 130 against 95; GLM-5.3's o_proj reaches 73% of the
# copy rate, its KDA front projections 93%). One device call of about 4 minutes, from the
# repository root, logs under $OUT. Then fit matmul_tiles.tiles' GEMV branch to the winners.
cd bench/sweeps || exit 1
timeout 420 python3 gemv.py --rounds 2 committed 16,8,4,128 16,8,4,256 32,8,8,128 \
    32,12,4,128 32,8,4,256 64,6,4,128 64,6,8,128 128,4,8,128 2>&1 | tee "$OUT/gemv.log"
