"""Training the orchestrator from its traces: records, exports, rewards, rollouts, SFT, GRPO, OPOD.

Nothing here imports torch at module level except the trainer modules, so
``orchestrion run`` stays fast; the training extra (``pip install 'orchestrion[train]'``)
brings torch, transformers, gguf, peft, trl, accelerate and datasets. The trainers
(``train_sft``, ``train_grpo``, ``train_opod``) are imported on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_names
from ._progress import StepDisplay
from .records import DecisionRecord, RecordFilter, filter_records, load_records
from .rewards import RewardConfig
from .settings import GRPOSettings, OPODSettings, RolloutSettings, SFTSettings, TreeSettings

if TYPE_CHECKING:
    from .grpo import GRPOResult, train_grpo
    from .opod import OPODResult, train_opod
    from .sft import SFTResult, train_sft

__getattr__, __dir__ = lazy_names(__name__, globals(), {
    **dict.fromkeys(("GRPOResult", "train_grpo"), ".grpo"),
    **dict.fromkeys(("OPODResult", "train_opod"), ".opod"),
    **dict.fromkeys(("SFTResult", "train_sft"), ".sft"),
})

__all__ = [
    "DecisionRecord", "GRPOResult", "GRPOSettings", "OPODResult", "OPODSettings", "RecordFilter", "RewardConfig",
    "RolloutSettings", "SFTResult", "SFTSettings", "StepDisplay", "TreeSettings", "filter_records", "load_records",
    "train_grpo", "train_opod", "train_sft",
]
