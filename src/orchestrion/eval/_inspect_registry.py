"""What Orchestrion registers with inspect_ai, loaded through inspect's entry points
(``[project.entry-points.inspect_ai] orchestrion = "orchestrion.eval._inspect_registry"``).

- the model API ``orchestrion``: ``--model orchestrion/<strategy>`` (:mod:`.inspect_provider`,
  imported only when such a model is asked for);
- the hook ``orchestrion_scores``: when a sample ends, inspect's scores of it are written into
  the meta of each Orchestrion episode the sample ran (found by the ``orchestrion`` info events
  that :mod:`._inspect_events` logs), as Orchestrion's own eval runner writes a score:
  ``score`` (the first scorer's value as a number: ``C`` 1, ``I`` 0, ``P`` 0.5), ``correct``
  (score 1), ``extracted`` (the scorer's answer), ``score_detail`` (its explanation),
  ``scorer`` (``inspect/<name>``) and ``inspect_scores`` (every scorer's value). A sample with
  no Orchestrion episode is left alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inspect_ai.hooks import Hooks, SampleEnd, hooks
from inspect_ai.model import ModelAPI, modelapi


@modelapi(name="orchestrion")
def orchestrion() -> type[ModelAPI]:
    from .inspect_provider import OrchestrionAPI

    return OrchestrionAPI


@hooks(name="orchestrion_scores", description="write inspect's sample scores into the Orchestrion episodes")
class ScoreWriteBack(Hooks):
    async def on_sample_end(self, data: SampleEnd) -> None:
        sample = data.sample
        if not sample.scores:
            return
        episodes = _episodes(sample.events)
        if not episodes:
            return
        patch = score_meta(sample.scores)
        from ..trace.store import TraceStore
        from ._inspect_events import STORES

        for path, trace_ids in episodes.items():
            store = STORES.get(path)
            owned = store is None
            if store is None:
                store = TraceStore(path)
            try:
                for trace_id in trace_ids:
                    store.patch_episode_meta(trace_id, patch)
                await store.aflush()
            finally:
                if owned:
                    store.close()


def _episodes(events: list[Any]) -> dict[str, list[str]]:
    """Trace ids by store path, from the sample's ``orchestrion`` info events."""
    from ._inspect_events import INFO_SOURCE

    found: dict[str, list[str]] = {}
    for event in events:
        if getattr(event, "event", None) != "info" or getattr(event, "source", None) != INFO_SOURCE:
            continue
        data = event.data if isinstance(event.data, dict) else {}
        trace_id, store = data.get("orchestrion_trace_id"), data.get("store")
        if isinstance(trace_id, str) and isinstance(store, str):
            found.setdefault(str(Path(store).resolve()), []).append(trace_id)
    return found


def score_meta(scores: dict[str, Any]) -> dict[str, Any]:
    """An episode's meta patch for inspect's scores of its sample (see the module doc)."""
    from inspect_ai.scorer import value_to_float

    to_float = value_to_float()
    name, first = next(iter(scores.items()))
    try:
        value: float | None = float(to_float(first.value))
    except (TypeError, ValueError):
        value = None  # a dict or list value has no single number
    return {"score": value, "correct": None if value is None else value == 1.0, "extracted": first.answer,
            "score_detail": first.explanation or "", "scorer": f"inspect/{name}",
            "inspect_scores": {k: s.value for k, s in scores.items()}}
