"""Scale-out: a Dask LocalCluster (2 worker processes) yields the same records as the serial run."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ensemblize.experiments.jobs import Execution

distributed = pytest.importorskip("distributed")


def _without_timing(x: Any) -> Any:
    """Records with every timing field (a key containing 'seconds') removed, as JSON text."""

    def strip(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: strip(w) for k, w in v.items() if "seconds" not in k}
        if isinstance(v, list):
            return [strip(w) for w in v]
        return v

    return json.dumps(strip(x), sort_keys=True)


@pytest.fixture(scope="module")
def scheduler():
    with distributed.LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None
    ) as cluster:
        yield cluster.scheduler_address


@pytest.mark.slow
def test_compare_on_a_local_cluster_equals_the_serial_run(tmp_path, scheduler):
    from ensemblize.experiments.image import ImageSetup, compare

    setup = ImageSetup(epochs=1, width=4, seeds=(0,), evaluation="tiny")
    kw = dict(setup=setup, methods=["single", "sigma"], members=2)
    serial = compare(**kw, out=tmp_path / "serial", execution=Execution(quiet=True))
    dask = compare(**kw, out=tmp_path / "dask", execution=Execution(quiet=True, scheduler=scheduler))
    assert [r["method"] for r in dask] == ["single", "sigma_ens"]
    assert _without_timing(dask) == _without_timing(serial)
    assert json.loads((tmp_path / "dask" / "results.json").read_text())[1]["method"] == "sigma_ens"


@pytest.mark.slow
def test_tabular_bench_on_a_local_cluster_equals_the_serial_run(tmp_path, scheduler):
    from ensemblize.experiments.tabular import tabular_bench

    kw = dict(datasets=["concrete"], methods=["lometab", "xgboost"], seeds=[0, 1], budget="tiny")
    serial = tabular_bench(**kw, out=tmp_path / "serial", execution=Execution(quiet=True))
    dask = tabular_bench(**kw, out=tmp_path / "dask", execution=Execution(quiet=True, scheduler=scheduler))
    assert len(dask) == 4
    assert _without_timing(dask) == _without_timing(serial)
