"""Pre-registered (19:31 UTC, before any test score of the candidate was read) check of ``n_networks=3``.

The candidate is the shipped estimator at ``n_networks=3`` as the benchmark runs it (``ensemblize
experiment tabular-bench --methods lometab --budget full``, split seed 0, model seeds 0-2, the 12
tables; run folders ``runs/s7/bench-n3-{a,b}``); the incumbent is the one-network default
(``choose_lometab_shape.default_lometab_records``). Rule: rank each with the field (official TabM at
its defaults, XGBoost, CatBoost) on seed-averaged VALIDATION scores; keep ``n_networks=3`` only if its
mean of the three per-score mean ranks is below the incumbent's. This script reads no test score.
(The candidate itself came from ``scripts/check_lometab_bagging.py``, whose pooled fits each had their
own preprocessing seed; the shipped estimator shares one preprocessor, hence this re-check on the
shipped code path.)

    python scripts/choose_lometab_networks.py [RUN_FOLDER ...]
"""

import json
import sys

from choose_lometab_shape import default_lometab_records, field_records, seed_means, select

from ensemblize.experiments.tabular import collect_records

folders = sys.argv[1:] or ["runs/s7/bench-n3-a", "runs/s7/bench-n3-b"]
candidate = sum((collect_records(f) for f in folders), [])
field = seed_means(field_records())
res = {}
for name, recs in {"n_networks=1": default_lometab_records(), "n_networks=3": candidate}.items():
    res[name] = select.mean_ranks(field + seed_means(recs, name), names=[name])
    cpu = sum(r["cpu_seconds"] for r in recs)
    print(
        name,
        f"CPU s {cpu:.0f}",
        json.dumps({n: {k: round(v, 3) for k, v in r.items()} for n, r in res[name].items()}),
    )
keep = res["n_networks=3"]["n_networks=3"]["select"] < res["n_networks=1"]["n_networks=1"]["select"]
print("CHOSEN", "n_networks=3" if keep else "n_networks=1")
