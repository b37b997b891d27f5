# The queued DSA indexer diagnostics (issue 7: the indexer at 128K, batch 16, is 64.2 us, 49.2%
# of HBM; 60% needs 52.6 us): what the score kernel's histogram atomics and score stores cost.
# One device call of about 4 minutes, from the repository root, logs under $OUT.
cd bench/sweeps || exit 1
Q=queued/dsa
timeout 400 python3 dsa_indexer.py --batch 16 --ctx 131072 --rounds 3 --no-check committed \
    $Q/score_no_histogram.py $Q/score_no_store.py 2>&1 | tee "$OUT/dsa_indexer.log"
