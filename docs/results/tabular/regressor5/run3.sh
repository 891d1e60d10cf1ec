#!/bin/bash
# the fresh split (split seed 3) of the benchmark's regression tables at the new default (LoMETab only)
export PYTHONPATH=/tmp/bench/src OMP_NUM_THREADS=1
date -u +"start %FT%T"
/work/main/.venv/bin/ensemblize experiment tabular-bench --datasets concrete,wage,ames --methods lometab --seeds 0,1,2 --budget full --threads 1 --workers 1 --split-seed 3 --out reg-split3 > log3.txt 2>&1
date -u +"done %FT%T"
