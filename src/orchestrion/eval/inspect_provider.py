"""Every Orchestrion strategy as an inspect_ai model: ``inspect eval TASK --model orchestrion/para``.

Orchestrion registers the model API ``orchestrion`` through inspect_ai's entry points (group
``inspect_ai`` in ``pyproject.toml``, module :mod:`orchestrion.eval._inspect_registry`), the
documented way for an extension package, so once Orchestrion is installed any inspect task whose
solver calls ``generate()`` can be run on a strategy::

    inspect eval task.py --model orchestrion/para -M pool=local -M store=traces.db -M max_rounds=4

Each ``generate()`` is one traced episode. The conversation becomes the task prompt as ``serve``
makes it (system messages as instructions, earlier turns as context, the last user message as the
request). Model args (``-M``): ``pool`` (a preset name or YAML path; default the embedded pool),
``store`` (the trace database; default Orchestrion's), ``run_id``, ``budget`` (a dict of
:class:`~orchestrion.Budget` fields), ``options`` (a dict of strategy options); any other ``-M``
key is a strategy option too. From inspect's generate config, ``max_tokens`` becomes the answer's
token limit and ``seed`` the episode's seed; the sampling fields are the strategy's own (each role
decodes at its own temperature). Tools offered by the task are not called: a strategy runs its
own tools and answers with text.

The output carries the episode's usage (so inspect's ``model_usage`` counts every call of the
episode once), ``metadata["orchestrion"]`` (strategy, status, trace id, cost, wall time) and, for
an episode that ended in ``error``, ``error``. The transcript gets the episode's spans, model
calls and tool calls (:mod:`._inspect_events`); the score hook writes inspect's score back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inspect_ai.model import ChatMessage, GenerateConfig, ModelAPI, ModelOutput, ModelUsage
from inspect_ai.tool import ToolChoice, ToolInfo

from ..models.pool import Pool, load_pool
from ..runtime.budget import Budget
from ..runtime.episode import run_episode
from ..runtime.types import Task
from ..status import EpisodeStatus
from ..strategies.registry import get_strategy
from ..trace.store import TraceStore
from ._inspect_events import log_episode, remember


class OrchestrionAPI(ModelAPI):
    """An Orchestrion strategy (``model_name``) behind inspect_ai's model API."""

    def __init__(self, model_name: str, base_url: str | None = None, api_key: str | None = None,
                 api_key_vars: list[str] | None = None, config: GenerateConfig | None = None, *,
                 pool: Pool | str | Path | None = None, store: TraceStore | str | Path | None = None,
                 run_id: str | None = None,
                 budget: dict[str, Any] | None = None, options: dict[str, Any] | None = None,
                 **more_options: Any) -> None:
        super().__init__(model_name, base_url, api_key, api_key_vars or [], config or GenerateConfig())
        self.strategy = get_strategy(model_name)  # an unknown strategy fails here, naming the known ones
        self.pool = load_pool(pool)
        self.store = remember(store if isinstance(store, TraceStore) else TraceStore(store))
        self.run_id = run_id
        self.budget = Budget.model_validate(budget or {})
        self.options = {**(options or {}), **more_options}

    async def aclose(self) -> None:
        await self.pool.aclose()
        await self.store.aflush()

    def max_connections(self) -> int:
        return 4  # episodes in flight at once; each runs many calls, bounded by the pool's own limits

    async def generate(self, input: list[ChatMessage], tools: list[ToolInfo], tool_choice: ToolChoice,
                       config: GenerateConfig) -> ModelOutput:
        options = dict(self.options)
        if config.max_tokens is not None:
            options.setdefault("max_tokens", config.max_tokens)
        if config.seed is not None:
            options.setdefault("seed", config.seed)
        task = Task(prompt=conversation_prompt(input), metadata={"source": "inspect", "messages": len(input)})
        result = await run_episode(task, self.strategy, pool=self.pool, store=self.store, budget=self.budget,
                                   options=options, run_id=self.run_id)
        await self.store.aflush()  # the transcript is read from the store
        log_episode(self.store, result.trace_id, self.strategy.name, count_usage=False)
        stop = {EpisodeStatus.OK: "stop", EpisodeStatus.BUDGET_EXCEEDED: "max_tokens"}.get(result.status, "unknown")
        output = ModelOutput.from_content(model=f"orchestrion/{self.strategy.name}", content=result.answer,
                                          stop_reason=stop)  # type: ignore[arg-type]
        output.usage = ModelUsage(input_tokens=result.usage.input_tokens, output_tokens=result.usage.output_tokens,
                                  total_tokens=result.usage.total_tokens,
                                  total_cost=None if result.cost_usd is None else float(result.cost_usd))
        output.time = result.wall_s
        output.metadata = {"orchestrion": {
            "strategy": self.strategy.name, "status": str(result.status), "trace_id": result.trace_id,
            "cost_usd": result.cost_usd, "wall_s": round(result.wall_s, 3)}}
        if result.status == EpisodeStatus.ERROR:
            output.error = result.error or "the episode failed"
        return output


def conversation_prompt(messages: list[ChatMessage]) -> str:
    """The task prompt for an inspect conversation, laid out as ``serve`` lays out a chat request."""
    users = [i for i, m in enumerate(messages) if m.role == "user"]
    if not users:
        raise ValueError("orchestrion: the conversation has no user message to answer")
    last = users[-1]
    request = messages[last].text.strip()
    instructions = [m.text.strip() for m in messages[:last] if m.role == "system" and m.text.strip()]
    turns = [f"{m.role.capitalize()}: {m.text.strip()}" for m in messages[:last] if m.role != "system"]
    parts = []
    if instructions:
        parts.append("Instructions:\n" + "\n\n".join(instructions))
    if turns:
        parts.append("Conversation so far:\n" + "\n".join(turns))
    return "\n\n".join([*parts, "Current request:\n" + request]) if parts else request
