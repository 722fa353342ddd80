"""The axes are written once, as Configuration's fields: the tables' columns, the defaults of older tables, the keys
that take one value or a list, all read off it; and a row can hold no column the tables' schema does not."""

from __future__ import annotations

import json
from dataclasses import fields

import pandas as pd
import pytest

import roundoff_analyzer as ra
from roundoff_analyzer.axes.grid import AXIS_DEFAULTS, CONFIG_COLUMNS, Configuration
from roundoff_analyzer.measuring.rows import Measurement
from roundoff_analyzer.planning.config import SweepConfig, list_valued_keys
from roundoff_analyzer.storage.result_schemas import RESULT_SCHEMA, TABLES_VERSION
from roundoff_analyzer.storage.results import ResultStore

from .conftest import run_cli

ONE_RUN = dict(timesteps=2, method="euler", library="native", dtype="bfloat16", scaling="none", device="cpu")


def test_every_list_valued_key_of_a_sweep_takes_a_single_value_from_python(tmp_path):
    """`arithmetic` and `rounding` were refused ("'arithmetic' must be a list") when the API listed its list keys by
    hand and left them out."""
    result = ra.sweep(
        model="linear",
        **ONE_RUN,
        arithmetic="emulated",
        rounding="nearest",
        out=tmp_path / "s",
        report=False,
        progress=False,
    )
    assert result.results[["arithmetic", "rounding", "status"]].values.tolist() == [["emulated", "nearest", "ok"]]
    assert {"arithmetic", "rounding", "timesteps", "keep_float32", "loss_in"} <= set(list_valued_keys(SweepConfig))


def test_the_tables_columns_and_the_older_tables_defaults_are_the_configurations_fields():
    assert RESULT_SCHEMA.names[: len(CONFIG_COLUMNS)] == [f.name for f in fields(Configuration)]
    assert RESULT_SCHEMA.field("n_timesteps").type == "int64"
    assert AXIS_DEFAULTS == {
        "arithmetic": "hardware",
        "rounding": "nearest",
        "checkpoint": "",
        "loss_in": "float32",
        "keep_float32": "none",
        "seed": 0,
    }


def test_a_folder_records_its_tables_version_and_one_from_a_newer_version_is_refused(tmp_path):
    """Older folders (no version) read through older_tables.py; a newer one is one line, not a misread table."""
    folder = tmp_path / "sweep"
    options = [f"--{key}={value}" for key, value in ONE_RUN.items()]
    assert run_cli("sweep", "--model", "linear", *options, "--no-report", "--out", folder).exit_code == 0
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["tables_version"] == TABLES_VERSION
    assert run_cli("show", folder).exit_code == 0
    (folder / "manifest.json").write_text(json.dumps({**manifest, "tables_version": TABLES_VERSION + 1}))
    for command in ("show", "report", "check"):
        extra = ["--baseline", folder] if command == "check" else []
        result = run_cli(command, folder, *extra)
        assert result.exit_code == 2, (command, result.output)
        newer = f"tables version {TABLES_VERSION + 1}; this one reads up to {TABLES_VERSION}"
        assert f"written by a newer roundoff-analyzer ({newer})" in result.output
    del manifest["tables_version"]  # a folder from before the version was recorded
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert run_cli("show", folder).exit_code == 0


def test_a_row_with_a_column_the_results_schema_lacks_is_refused_not_dropped(tmp_path):
    """A column added to the rows (measuring/rows.py) but not to the schema would vanish from every table: the store
    refuses the row, naming the column, and writes no shard."""
    folder = tmp_path / "sweep"
    options = [f"--{key}={value}" for key, value in ONE_RUN.items()]
    assert run_cli("sweep", "--model", "linear", *options, "--no-report", "--out", folder).exit_code == 0
    row = pd.read_parquet(folder / "results.parquet").iloc[0].to_dict()
    config = Configuration(**{c: row[c] for c in CONFIG_COLUMNS})
    store = ResultStore(tmp_path / "other")
    with pytest.raises(ValueError, match="columns the results schema does not: grad_rel_err_new"):
        store.write(config, Measurement({**row, "grad_rel_err_new": 1.0}, [], []))
    assert not (tmp_path / "other" / "shards").exists()


class PlainDoubling:
    """A scaling as a plug-in may write one: the protocol's required members only (no words, no glossary)."""

    name = "doubling"
    description = "the loss doubled before a plain backward"

    def skip_reason(self, library):
        return None

    def adjoint_scaler(self, settings):
        return None

    def backward(self, loss, leaves, adjoint_scaler, settings, hint=None):
        from roundoff_analyzer.axes.scalings.base import BackwardResult, plain_backward

        return BackwardResult(plain_backward(2 * loss, leaves))


def test_a_scalings_words_and_glossary_are_its_own_and_a_plug_in_without_them_reads_with_defaults():
    from roundoff_analyzer.axes.scalings import SCALINGS
    from roundoff_analyzer.axes.scalings.base import ScalingRegistry
    from roundoff_analyzer.report import formatting

    assert [formatting.scaling_words(s) for s in ("none", "grad", "dynamic", "unknown")] == [
        "no scaling",
        "`grad` loss scaling",
        "`dynamic` adjoint scaling",
        "`unknown` scaling",
    ]
    assert formatting.scaling_glossary("none") is None and "GradScaler" in (formatting.scaling_glossary("grad") or "")
    registry = ScalingRegistry("scaling")
    plug_in = registry.register(PlainDoubling())
    assert (plug_in.words, plug_in.glossary, plug_in.searches_scale) == ("`doubling` scaling", None, False)
    assert plug_in.description == PlainDoubling.description and "grad" in SCALINGS
