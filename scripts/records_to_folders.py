"""Write a selection round's records of one candidate as benchmark run folders (reporting only).

``scripts/choose_classifier_setting.py`` keeps its fits as JSON lines; ``report_split.py`` and
``report_split0.py`` read benchmark run folders. This writes candidate ``NAME``'s records of ``FILE`` as
``OUT-splitS/jobs/<table>_lometab_seed=<seed>.json`` (one folder per split seed) and, with
``--regression-from PATTERN`` (``{s}`` = the split seed), copies the regression job files of those run
folders beside them, so a folder holds the shipped defaults of both tasks::

    python scripts/records_to_folders.py runs/s15/clfsel14.jsonl ep200 runs/s15/cur \\
        --regression-from 'runs/s13/lometab-split{s}'
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", type=Path)
    parser.add_argument("candidate")
    parser.add_argument("out", help="folder prefix: OUT-split0, OUT-split1, ...")
    parser.add_argument("--regression-from", default=None, metavar="PATTERN")
    args = parser.parse_args()
    splits, n = set(), 0
    for line in args.records.read_text().splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        if r["candidate"] != args.candidate:
            continue
        jobs = Path(f"{args.out}-split{r['split_seed']}/jobs")
        jobs.mkdir(parents=True, exist_ok=True)
        rec = {k: v for k, v in r.items() if k != "candidate"}
        (jobs / f"{r['dataset']}_lometab_seed={r['seed']}.json").write_text(json.dumps({"records": [rec]}))
        splits.add(r["split_seed"])
        n += 1
    if not n:
        raise SystemExit(f"no records of candidate {args.candidate!r} in {args.records}")
    for s in sorted(splits) if args.regression_from else ():
        for path in sorted(Path(args.regression_from.format(s=s), "jobs").glob("*_lometab_*.json")):
            if all(r["task"] == "regression" for r in json.loads(path.read_text())["records"]):
                shutil.copy(path, Path(f"{args.out}-split{s}/jobs") / path.name)
                n += 1
    print(f"{n} job files in {args.out}-split{{{','.join(map(str, sorted(splits)))}}}")


if __name__ == "__main__":
    main()
