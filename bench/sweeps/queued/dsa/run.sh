# One device call (about 5 minutes): the DSA indexer's variants at 128K, batch 16 and batch 1
# (issue 7: 60% of HBM at batch 16 needs 52.6 us; 64.2 at 31c3191), each checked against the
# reference before it is timed; logs under $OUT.
d=bench/sweeps/queued/dsa
for b in ${DSA_BATCHES:-16 1}; do  # DSA_BATCHES=16: batch 16 alone
    timeout 280 python3 bench/sweeps/dsa_indexer.py --batch $b --ctx 131072 --rounds 2 committed \
        $d/hist_dedup.py $d/cands_w1.py $d/cands_w2.py $d/dedup_cands_w2.py $d/persistent_660.py \
        $d/persistent_660_dedup.py $d/persistent_1320.py 2>&1 | tail -17 | tee -a "$OUT/dsa.log"
done
