# The queued MLA variants (the DSA layer's sparse attention at decode: absorb 6, attend 22-24,
# merge 23 us at batch 1 in GLM-5.3-Flash's decode step, 54 us of a 5.4 us byte floor; 126 us
# at batch 16): the merge over every split at once, and 32 or 64 index chunks a row. One device
# call of about 3 minutes, from the repository root, logs under $OUT.
cd bench/sweeps || exit 1
Q=queued/mla
for b in 1 16; do
    timeout 200 python3 dsa_indexer.py --mla --batch $b --ctx 4096 --rounds 2 committed \
        $Q/vec_merge.py $Q/splits32.py $Q/splits64.py 2>&1 | tee "$OUT/mla_b$b.log"
done
