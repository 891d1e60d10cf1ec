"""The claims engine: each verdict word against records built by hand, the selective pairing, and the
console lines."""

from __future__ import annotations

import pytest

from ensemblize.report.claims import Claim, format_claims, selective_verdicts, verdict


def _rec(method, seed, value, **extra):
    return {"method": method, "seed": seed, "metrics": {"nll": value}, **extra}


def _claim(**kw):
    return Claim(
        "a beats b", lambda r: r["method"] == "a", lambda r: r["method"] == "b", "nll", names=("a", "b"), **kw
    )


@pytest.mark.parametrize(
    ("ours", "theirs", "kw", "word"),
    [
        ([1, 1, 1], [2, 2, 2], {}, "supported"),
        ([3, 3, 3], [2, 2, 2], {}, "refuted"),
        ([1, 3, 2], [2, 2, 2], {}, "mixed"),  # better, worse, tied
        ([2, 3, 2], [2, 2, 2], {}, "not supported"),  # ties and a loss, no win
        ([2, 2, 2], [2, 2, 2], {}, "not supported"),  # all tied: a strict claim is not supported
        ([2, 1, 2], [2, 2, 2], {"at_least_as_good": True}, "supported"),  # ties count for "no worse"
        ([3, 1, 2], [2, 2, 2], {"at_least_as_good": True}, "mixed"),
        ([3, 3, 3], [2, 2, 2], {"lower_is_better": False}, "supported"),
    ],
)
def test_verdict_words_follow_the_stated_rule(ours, theirs, kw, word):
    records = [_rec("a", s, v) for s, v in enumerate(ours)] + [_rec("b", s, v) for s, v in enumerate(theirs)]
    row = verdict(records, _claim(**kw))
    assert row["verdict"] == word and row["claim"] == "a beats b"
    mean_a, mean_b = sum(ours) / 3, sum(theirs) / 3
    assert (
        f"a {mean_a:.4g} vs b {mean_b:.4g} (mean of 3 finite pairs); 3 pairs matched on seed"
        in row["evidence"]
    )


def test_only_matched_pairs_count_a_diverged_run_loses_and_duplicates_are_refused():
    records = [_rec("a", 0, 1.0), _rec("a", 2, 1.0), _rec("b", 0, 2.0), _rec("b", 1, 2.0)]
    row = verdict(records, _claim())
    assert row["verdict"] == "supported" and "1 pair matched on seed" in row["evidence"]
    assert "one pair only" in row["evidence"] and "*" in format_claims([row]).splitlines()[1]
    # σN-Ens diverging (NaN) on two of three seeds is not "supported on the one left"
    records = [_rec("a", 0, 1.0), _rec("a", 1, float("nan")), _rec("a", 2, float("inf"))]
    records += [_rec("b", s, 2.0) for s in range(3)]
    row = verdict(records, _claim())
    assert row["verdict"] == "mixed" and "better in 1, worse in 2" in row["evidence"]
    assert "2 with a non-finite value (it counts as the worse)" in row["evidence"]
    row = verdict([_rec("a", 0, float("nan")), _rec("b", 0, float("nan"))], _claim())
    assert row["verdict"] == "not supported" and "no pair with two finite values" in row["evidence"]
    row = verdict([_rec("a", 0, 1.0)], _claim())
    assert row["verdict"] == "not measured" and "no record of b" in row["evidence"]
    with pytest.raises(ValueError, match=r"two records of a share \{'seed': 0\}"):
        verdict([_rec("a", 0, 1.0, dataset="x"), _rec("a", 0, 3.0, dataset="y"), _rec("b", 0, 2.0)], _claim())


def test_selective_claims_pair_on_seed_and_coverage_and_deep_gamblers_at_every_target():
    def sel(method, seed, target, scoring, risks):
        return {"method": method, "seed": seed, "target": target, "scoring": scoring,
                "metrics": {f"risk@{c:g}": v for c, v in risks.items()}}  # fmt: skip

    records = []
    for seed in (0, 1):
        for c in (0.5, 0.9):
            records.append(sel("SYNC-SMP(γ=2)", seed, c, "w/o SR", {c: 0.10}))
            records.append(sel("SelectiveNet", seed, c, "w/o SR", {c: 0.20}))
            records.append(sel("SelectiveNet", seed, c, "w/ SR", {c: 0.10}))  # a tie: "at least as good"
        records.append(sel("DeepGamblers", seed, None, "w/o SR", {0.5: 0.05, 0.9: 0.30}))  # wins at 0.5 only
    rows = {r["claim"].split(" ", 1)[1][:40]: r for r in selective_verdicts(records)}
    words = [r["verdict"] for r in rows.values()]
    assert words == ["supported", "supported", "mixed"]
    assert all("4 pairs matched on seed, target" in r["evidence"] for r in rows.values())
