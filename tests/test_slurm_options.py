"""sbatch options mean the same from the command line and from a config file (no cluster needed)."""

from __future__ import annotations

import pytest

from roundoff_analyzer.planning import config

pytestmark = pytest.mark.unit


def test_true_and_false_mean_a_bare_flag_and_no_flag_on_both_sides(tmp_path):
    toml = tmp_path / "sweep.toml"
    toml.write_text('model = "linear"\n[slurm.options]\nhold = true\nexclusive = false\naccount = "abc"\n')
    from_file = config.resolve(toml, {}).slurm.options
    from_cli = config.resolve(
        None,
        {
            "model": "linear",
            "slurm": {"options": config.parse_sbatch_options(["hold=true", "exclusive=False", "account=abc"])},
        },
    ).slurm.options
    assert from_file == from_cli == {"hold": True, "account": "abc"}
    assert config.parse_sbatch_options(["requeue"]) == {"requeue": True}
