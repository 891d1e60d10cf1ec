#!/bin/bash
# the sixteenth round's test run: the shipped regressor (n_networks 5) on the benchmark's three regression tables
export PYTHONPATH=/tmp/bench/src OMP_NUM_THREADS=1
E="/work/main/.venv/bin/ensemblize experiment tabular-bench --datasets concrete,wage,ames --methods lometab --seeds 0,1,2 --budget full --threads 1"
date -u +"start %FT%T"
$E --workers 1 --split-seed 0 --out reg-split0 > log0.txt 2>&1 &
$E --workers 1 --split-seed 1 --out reg-split1 > log1.txt 2>&1 &
wait
date -u +"splits 0,1 done %FT%T"
$E --workers 2 --split-seed 2 --out reg-split2 > log2.txt 2>&1
date -u +"done %FT%T"
