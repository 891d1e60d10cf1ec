"""The papers' claims, and what a run's own records say about them: ``claims.json``.

A :class:`Claim` names a method, a baseline, a metric and the direction the paper says the method
wins in. :func:`verdict` pairs the two sides' records on their shared keys (the seed, and the target
coverage where there is one), compares each pair, and returns one row for ``claims.json`` (which
``report.html`` renders under "Claims and verdicts" and the commands print)::

    {"claim": str, "verdict": "supported" | "refuted" | "mixed" | "not supported" | "not measured",
     "evidence": str}

The rule is deliberately plain and stated in every row: **supported** when the method is better in
every pair, **refuted** when it is worse in every pair, **mixed** when it is better in some and worse
in others, **not supported** otherwise (ties with no loss on a strict claim, or ties and losses with no
win); a tie counts for the method only in an "at least as good" claim, and a non-finite value (a diverged
run) is the worse of a pair. **not measured**: the run has no pair (a method or metric left out). Two
records of one side with the same pairing key are a ValueError (pass one dataset's records). With one seed a verdict rests on one pair, and the
evidence says so; nothing here is a significance test. The claims are the papers' as the experiments
measure them (:data:`SIGMA_CLAIMS`, :func:`selective_claims`); the verdicts are only this run's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Claim",
    "verdict",
    "verdicts",
    "write_claims",
    "format_claims",
    "SIGMA_CLAIMS",
    "selective_claims",
    "selective_verdicts",
]

_ONE_PAIR = "one pair only"

#: the verdict words, from the rule in the module docstring
VERDICTS = ("supported", "refuted", "mixed", "not supported", "not measured")


@dataclass(frozen=True)
class Claim:
    """One directional claim: ``method`` beats ``baseline`` on ``metric``.

    Args:
        text: the claim in words.
        method, baseline: record predicates (``record -> bool``) selecting each side's records.
        metric: the metric's key in ``record["metrics"]``, or a function ``record -> key`` (e.g. the
            risk at the record's own target coverage).
        lower_is_better: the metric's direction.
        pair_on: the record keys a method record and a baseline record must share to be compared.
        at_least_as_good: a tie supports the claim (an "is no worse than" claim).
        names: how the evidence names the two sides.
    """

    text: str
    method: Callable[[Mapping[str, Any]], bool]
    baseline: Callable[[Mapping[str, Any]], bool]
    metric: str | Callable[[Mapping[str, Any]], str]
    lower_is_better: bool = True
    pair_on: tuple[str, ...] = ("seed",)
    at_least_as_good: bool = False
    names: tuple[str, str] = ("method", "baseline")
    metric_name: str = field(default="", compare=False)


def _value(record: Mapping[str, Any], claim: Claim) -> float | None:
    """The record's metric as a float (NaN / inf kept: a diverged run), or None when it has none."""
    key = claim.metric(record) if callable(claim.metric) else claim.metric
    value = record.get("metrics", {}).get(key)
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _side(records: Sequence[Mapping[str, Any]], claim: Claim, pick, name: str) -> dict[tuple, float]:
    out: dict[tuple, float] = {}
    for r in records:
        if not pick(r):
            continue
        value = _value(r, claim)
        if value is None:
            continue
        key = tuple(r.get(k) for k in claim.pair_on)
        if key in out:
            raise ValueError(
                f"claim {claim.text!r}: two records of {name} share {dict(zip(claim.pair_on, key, strict=True))}; "
                f"pair them on more keys (pair_on) or pass one dataset's records"
            )
        out[key] = value
    return out


def _compare(ours: float, theirs: float, lower_is_better: bool) -> int:
    """-1: ours is better, 1: worse, 0: tied. A non-finite value (a diverged run) loses to a finite one;
    two non-finite values tie."""
    if not math.isfinite(ours) or not math.isfinite(theirs):
        return (not math.isfinite(ours)) - (not math.isfinite(theirs))
    diff = (ours - theirs) if lower_is_better else (theirs - ours)
    return (diff > 0) - (diff < 0)


def verdict(records: Sequence[Mapping[str, Any]], claim: Claim) -> dict[str, str]:
    """The claims.json row of ``claim`` on ``records`` (see the module docstring for the rule).

    Raises ValueError when two records of one side share a pairing key (``pair_on``)."""
    ours = _side(records, claim, claim.method, claim.names[0])
    theirs = _side(records, claim, claim.baseline, claim.names[1])
    keys = sorted(set(ours) & set(theirs), key=repr)
    metric = claim.metric_name or (claim.metric if isinstance(claim.metric, str) else "the metric")
    if not keys:
        missing = [n for n, side in zip(claim.names, (ours, theirs), strict=True) if not side]
        why = f"no record of {' or '.join(missing)}" if missing else "no records that pair up"
        return {
            "claim": claim.text,
            "verdict": "not measured",
            "evidence": f"{why} with {metric} in this run",
        }
    outcomes = [_compare(ours[k], theirs[k], claim.lower_is_better) for k in keys]
    better, worse = outcomes.count(-1), outcomes.count(1)
    ties = len(keys) - better - worse
    wins = better + (ties if claim.at_least_as_good else 0)
    if wins == len(keys):
        word = "supported"
    elif worse == len(keys):
        word = "refuted"
    elif better and worse:
        word = "mixed"
    else:  # no loss and some ties (a strict claim), or no win: ties and losses
        word = "not supported"
    finite = [k for k in keys if math.isfinite(ours[k]) and math.isfinite(theirs[k])]
    direction = "lower" if claim.lower_is_better else "higher"
    unit = "pair" if len(keys) == 1 else "pairs"
    paired = ", ".join(claim.pair_on)
    if finite:
        means = (
            f"{claim.names[0]} {sum(ours[k] for k in finite) / len(finite):.4g} vs {claim.names[1]} "
            f"{sum(theirs[k] for k in finite) / len(finite):.4g} (mean of {len(finite)} finite "
            f"{'pair' if len(finite) == 1 else 'pairs'})"
        )
    else:
        means = "no pair with two finite values"
    evidence = (
        f"{metric} ({direction} is better): {means}; {len(keys)} {unit} matched on {paired}: better in {better}, "
        f"worse in {worse}, tied in {ties}"
    )
    if len(finite) < len(keys):
        evidence += f"; {len(keys) - len(finite)} with a non-finite value (it counts as the worse)"
    if len(keys) == 1:
        evidence += f"; {_ONE_PAIR}: run more seeds before reading much into it"
    return {"claim": claim.text, "verdict": word, "evidence": evidence}


def verdicts(records: Sequence[Mapping[str, Any]], claims: Sequence[Claim]) -> list[dict[str, str]]:
    """:func:`verdict` of every claim, in order."""
    return [verdict(records, c) for c in claims]


def write_claims(out: str | Path, rows: Sequence[Mapping[str, str]]) -> Path:
    """Atomically write ``rows`` to ``out/claims.json`` (what ``report.html`` renders); the path."""
    from ..checkpoint import atomic_write_json

    return atomic_write_json(Path(out) / "claims.json", [dict(r) for r in rows])


def format_claims(rows: Sequence[Mapping[str, str]]) -> str:
    """The verdicts as console lines, ``verdict  claim``; the evidence is in claims.json and report.html.
    A verdict resting on a single pair (one seed) is marked ``*``."""
    lines = ["Claims, judged on this run's records (supported: the method is better in every matched "
             "pair; evidence in claims.json):"]  # fmt: skip
    single = False
    for r in rows:
        star = "*" if _ONE_PAIR in r.get("evidence", "") else ""
        single = single or bool(star)
        lines.append(f"  {r['verdict'] + star:<14} {r['claim']}")
    if single:
        lines.append("  * one pair only (one seed): run more seeds before reading much into it")
    return "\n".join(lines)


def _method(name: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda r: r.get("method") == name


#: σN-Ens (record method ``sigma_ens``) against the single model and the deep ensemble, as the default
#: job and ``experiment compare`` label them: the paper's claims that σN members give a better calibrated,
#: lower-NLL ensemble than one model, approaching a deep ensemble at one backbone's parameters.
SIGMA_CLAIMS: tuple[Claim, ...] = (
    Claim("σN-Ens has a lower test NLL than the single model", _method("sigma_ens"), _method("single"),
          "nll", names=("σN-Ens", "single")),
    Claim("σN-Ens is better calibrated than the single model (ECE, 15 bins)", _method("sigma_ens"),
          _method("single"), "ece", names=("σN-Ens", "single")),
    Claim("σN-Ens is at least as accurate as the single model", _method("sigma_ens"), _method("single"),
          "accuracy", lower_is_better=False, at_least_as_good=True, names=("σN-Ens", "single")),
    Claim("σN-Ens reaches the deep ensemble's test NLL (at about one model's parameters)",
          _method("sigma_ens"), _method("deep_ensemble"), "nll", at_least_as_good=True,
          names=("σN-Ens", "deep ensemble")),
)  # fmt: skip


def _risk_at_target(record: Mapping[str, Any]) -> str:
    return f"risk@{float(record['target']):g}"


def selective_claims(records: Sequence[Mapping[str, Any]]) -> list[Claim]:
    """SYNC's claims on ``experiment selective`` records, one per SYNC variant in the run.

    For each SYNC method (``SYNC-…`` labels, σN-SYNC included) and each target coverage ``c`` it was
    trained for, its test selective risk at coverage ``c`` against (1) SelectiveNet trained for the
    same ``c``, both scored by their own selection head ("w/o SR"); (2) SelectiveNet scored by its
    softmax response ("w/ SR"): the paper's claim that SYNC needs no post-hoc score to match one;
    (3) Deep Gamblers, scored by its own abstention output, at the same coverage. Pairs are matched on
    the seed and the coverage.
    """
    variants = sorted({r["method"] for r in records if "SYNC" in str(r.get("method", ""))})
    #: (baseline method, its scoring, how the claim reads, its name in the evidence, a tie supports it)
    against = (
        ("SelectiveNet", "w/o SR", "has a lower selective risk than SelectiveNet at its target coverage "
         "(both w/o SR)", "SelectiveNet", False),
        ("SelectiveNet", "w/ SR", "without SR is at least as good as SelectiveNet with SR (selective risk "
         "at the target coverage)", "SelectiveNet w/ SR", True),
        ("DeepGamblers", "w/o SR", "has a lower selective risk than Deep Gamblers at its target coverage "
         "(both w/o SR)", "Deep Gamblers", False),
    )  # fmt: skip
    claims: list[Claim] = []
    for name in variants:

        def mine(r: Mapping[str, Any], n: str = name) -> bool:
            return r.get("method") == n and r.get("scoring") == "w/o SR" and r.get("target") is not None

        for method, scoring, text, shown, tie_supports in against:

            def theirs(r: Mapping[str, Any], m: str = method, s: str = scoring) -> bool:
                return r.get("method") == m and r.get("scoring") == s

            claims.append(Claim(
                f"{name} {text}", mine, theirs, _risk_at_target, pair_on=("seed", "target"),
                at_least_as_good=tie_supports, names=(name if not tie_supports else f"{name} w/o SR", shown),
                metric_name="test selective risk at the target coverage",
            ))  # fmt: skip
    return claims


def selective_verdicts(records: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """:func:`selective_claims` judged on ``records``. Deep Gamblers trains no target coverage, so each
    of its records is compared at every target coverage the SYNC models were trained for."""
    targets = sorted({r["target"] for r in records if r.get("target") is not None})
    expanded = [
        {**r, "target": t} if r.get("method") == "DeepGamblers" and r.get("target") is None else r
        for r in records
        for t in (targets if r.get("method") == "DeepGamblers" and r.get("target") is None else [None])
    ]
    return verdicts(expanded, selective_claims(records))
