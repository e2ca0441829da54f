"""The trainers' settings objects: documented fields, one-line errors, JSON records."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from orchestrion import ConfigError, GRPOSettings, OPODSettings, RolloutSettings, SFTSettings, TreeSettings
from orchestrion.strategies.baselines import Direct

ALL = (RolloutSettings, TreeSettings, SFTSettings, GRPOSettings, OPODSettings)


@pytest.mark.parametrize("cls", ALL)
def test_every_field_has_a_default_and_a_description(cls: type) -> None:
    fields = cls.model_fields  # type: ignore[attr-defined]
    assert fields and all(f.description and not f.is_required() for f in fields.values())
    json.dumps(cls().record())  # the defaults are a JSON-ready run record


def test_bad_values_are_one_line_errors_naming_the_field() -> None:
    with pytest.raises(ConfigError, match=r"^GRPOSettings\.engine: Input should be 'trl' or 'loop'$"):
        GRPOSettings.build(engine="vllm")
    with pytest.raises(ConfigError, match=r"^OPODSettings\.temperature: Input should be greater than or equal to 0"):
        OPODSettings.build(temperature=-1.0)
    with pytest.raises(ConfigError, match=r"^TreeSettings\.branching: Input should be greater than or equal to 1"):
        TreeSettings.build(branching=0)


def test_a_strategy_object_is_recorded_by_name() -> None:
    settings = GRPOSettings(strategy=Direct(), group=3)
    record = settings.record()
    assert record["strategy"] == "direct" and record["group"] == 3 and record["engine"] == "trl"
    assert isinstance(settings, RolloutSettings)  # GRPO's settings are the rollouts' settings too
    assert settings.model_copy(update={"seed": 7}).seed == 7 and settings.seed == 0


def test_cli_help_names_the_engine_and_resume() -> None:
    from orchestrion import cli

    text = CliRunner().invoke(cli.app, ["train", "grpo", "--help"], terminal_width=200).output
    assert "--engine" in text and "--stop-after" in text and "continue" in text
    text = CliRunner().invoke(cli.app, ["train", "opod", "--help"], terminal_width=200).output
    assert "--stop-after" in text
