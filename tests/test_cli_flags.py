"""Trainer flags come from the settings classes: one default, bound and help text per field."""

from __future__ import annotations

from typing import Any

import typer
from typer.testing import CliRunner

from orchestrion.cli import app
from orchestrion.cli._train_rl import GRPO_FLAGS, OPOD_FLAGS
from orchestrion.cli._train_sft import SFT_FLAGS
from orchestrion.train.settings import GRPOSettings, OPODSettings, SFTSettings


def _options(command: str) -> dict[str, Any]:
    """The click options of ``orchestrion train COMMAND`` by parameter name (typer's click types)."""
    train: Any = typer.main.get_command(app).commands["train"]  # type: ignore[attr-defined]
    return {p.name: p for p in train.commands[command].params if p.param_type_name == "option"}


def test_each_trainer_flag_has_its_settings_default_and_help() -> None:
    trainers = (("grpo", GRPOSettings, GRPO_FLAGS), ("opod", OPODSettings, OPOD_FLAGS), ("sft", SFTSettings, SFT_FLAGS))
    for command, settings, names in trainers:
        options = _options(command)
        for name in names:
            field = settings.model_fields[name]
            option = options[name]
            assert option.help == field.description, (command, name)
            default = field.get_default(call_default_factory=True)
            assert option.default == default or str(option.default) == str(default), (command, name)


def test_renamed_flags_and_bounds() -> None:
    grpo = _options("grpo")
    assert grpo["max_steps_now"].opts == ["--stop-after"] and grpo["strategy"].opts == ["--strategy", "-s"]
    assert _options("opod")["lam"].opts == ["--lambda"] and _options("sft")["gguf_path"].opts == ["--gguf"]
    res = CliRunner().invoke(app, ["train", "grpo", "--dataset", "jsonl:none.jsonl", "--group", "1"])
    assert res.exit_code == 2 and "--group" in res.output  # the settings' bound (ge=2), refused by the parser


def test_lora_alpha_is_twice_the_rank_unless_set() -> None:
    assert GRPOSettings(lora_r=4).lora_alpha == 8 and GRPOSettings().lora_alpha == 16
    assert OPODSettings(lora_r=16, lora_alpha=3).lora_alpha == 3
