"""Four-way test and validation mean ranks of benchmark run folders that share one split.

Merges the records of ``ensemblize experiment tabular-bench`` run folders (finished or not), keeps
the tables on which every method has every seed, and prints the per-table test report
(``bench_markdown``: scores, mean ranks, cost) and the validation mean ranks (the same ranking on the
``val_*`` scores). ``--field`` folders add the records of methods the positional folders lack (a method re-run
alone, ranked against the rest of an older four-way run). Nothing here chooses anything; it reports a
split that no default was chosen on::

    python scripts/report_split.py runs/s9/tabm-split1-a runs/s9/tabm-split1-b \\
        runs/s7/split1/gbdt-a runs/s7/split1/gbdt-b runs/s9/lometab-split1 --title "split seed 1"
"""

import argparse
import copy

from ensemblize.experiments.tabular import SCORES, bench_markdown, collect_records, complete_tables
from ensemblize.experiments.tabular_tables import average_ranks

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("folders", nargs="+")
parser.add_argument(
    "--field",
    nargs="*",
    default=[],
    help="run folders whose records count only for methods the positional folders do not have "
    "(e.g. an older four-way run after one method was re-run)",
)
parser.add_argument("--title", default="one split")
args = parser.parse_args()

records = collect_records(*args.folders)
rerun = {r["method"] for r in records}
records += [r for r in collect_records(*args.field) if r["method"] not in rerun] if args.field else []
records = complete_tables(records)  # every method, every seed
splits = sorted({r.get("split_seed", 0) for r in records})
print(bench_markdown(records, title=f"Tabular benchmark, {args.title} (split seeds {splits}), test"))
validation = []
for r in records:
    v = copy.deepcopy(r)
    v["metrics"] = {k[4:]: x for k, x in r["metrics"].items() if k.startswith("val_")}
    validation.append(v)
print("## Validation mean ranks\n")
print("| method | " + " | ".join(m for m in SCORES) + " |")
print("|---|" + "---|" * len(SCORES))
ranks = {m: average_ranks(validation, metric=m)["average"] for m in SCORES}
for method in sorted({r["method"] for r in records}):
    print(f"| {method} | " + " | ".join(f"{ranks[m].get(method, float('nan')):.2f}" for m in SCORES) + " |")
