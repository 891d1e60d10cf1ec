#!/bin/bash
# the shipped classifier re-run on the benchmark's nine classification tables (the published figures predate session 18's layer change)
export PYTHONPATH=/tmp/bench2/src OMP_NUM_THREADS=1
E="/work/main/.venv/bin/ensemblize experiment tabular-bench --datasets credit,churn,telco,attrition,hmda,creditcard,stackoverflow,hpc,wvs --methods lometab --seeds 0,1,2 --budget full --threads 1"
date -u +"start %FT%T"
$E --workers 1 --split-seed 0 --out clf-split0 > log0.txt 2>&1 &
$E --workers 1 --split-seed 1 --out clf-split1 > log1.txt 2>&1 &
wait
date -u +"splits 0,1 done %FT%T"
$E --workers 2 --split-seed 2 --out clf-split2 > log2.txt 2>&1
date -u +"done %FT%T"
