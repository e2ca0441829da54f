"""The answer channel: a synthesis streams its answer grounded as it goes (the pieces joined are
the final answer, whatever the model's token boundaries), only the first synthesis streams, and
the embedded model streams token by token and stops within a token when cancelled."""

from __future__ import annotations

import asyncio
import random
import threading

import pytest

from orchestrion import GenerateConfig, Pool, ScriptedModel, TraceStore, solve
from orchestrion.models.types import msg
from orchestrion.runtime.answer import AnswerChannel, text_pieces
from orchestrion.runtime.synthesis import Evidence, GroundedStream, ground

EVIDENCE = [Evidence("calculator 12*13 -> status=OK 156"), Evidence("reasoner (ok): thinking...\nAnswer: 42")]
ATOMS = ["[", "R", "1", "2", "3", "]", " ", "\n", "Answer", ":", "answer", "final", "Final answer", "x", "7", ".",
         "[R1]", "[R2]", "R2", "abc", "  "]


def streamed(raw: str, cuts: list[int]) -> str:
    out: list[str] = []
    stream = GroundedStream(EVIDENCE, out.append)
    start = 0
    for end in [*cuts, len(raw)]:
        stream.feed(raw[start:end])
        start = end
    return "".join(out)


def test_streamed_text_is_always_a_prefix_of_the_grounded_answer() -> None:
    rng = random.Random(7)
    for _ in range(3000):
        raw = "".join(rng.choice(ATOMS) for _ in range(rng.randint(0, 12)))
        cuts = sorted(rng.sample(range(len(raw) + 1), k=min(len(raw), rng.randint(0, 6))))
        final, _ = ground(raw.strip(), EVIDENCE)
        assert final.startswith(streamed(raw, cuts)), raw


@pytest.mark.parametrize(("raw", "released"), [
    # the last citation may still point at an answer line, and "Answer:" may still become "Answer: R2"
    ("The product is [R1].\nAnswer: [R1]", "The product is 156.\nAnswer:"),
    ("So 12*13 = 156.\nAnswer: 156", "So 12*13 = 156.\nAnswer: 156"),
    ("Both results agree.\nR2", "Both results agree."),  # a bare label on the last line: "Answer: 42" later
    ("Done.\nAnswer: R2", "Done.\nAnswer:"),
    ("[R1] Answer: 156", "Answer: 156"),  # a pointer label is dropped once "Answer:" follows it
])
def test_text_is_released_as_soon_as_it_is_settled(raw: str, released: str) -> None:
    final, _ = ground(raw.strip(), EVIDENCE)
    sent = streamed(raw, list(range(1, len(raw))))  # one character at a time
    assert sent == released and final.startswith(sent)


def test_text_pieces_rejoin_exactly() -> None:
    for text in ["", "one", "  two words  ", "a\nb  c\n"]:
        assert "".join(text_pieces(text)) == text


async def test_only_the_first_synthesis_streams_and_the_rest_is_sent_at_the_end(store: TraceStore) -> None:
    got: list[str] = []
    channel = AnswerChannel(got.append)
    res = await solve("What is 2+3?", strategy="cot", pool=Pool.from_models([ScriptedModel(["5 it is"])]),
                      store=store, answer=channel)
    assert res.answer == "5 it is" and not channel.claimed and got == []  # cot has no synthesis: not streamed
    assert channel.claim() and not channel.claim()
    assert channel.finish("5 it is", "stop") and "".join(got) == "5 it is" and channel.finish_reason == "stop"
    assert not channel.finish("something else", "stop")  # a stream that went astray is reported


async def test_direct_streams_its_answer(store: TraceStore) -> None:
    got: list[str] = []
    channel = AnswerChannel(got.append)
    res = await solve("What is 2+3?", strategy="direct", pool=Pool.from_models([ScriptedModel([" 5 it is "])]),
                      store=store, answer=channel)
    assert res.answer == "5 it is" and channel.claimed and "".join(got) == "5 it is"


@pytest.mark.integration
async def test_the_embedded_model_streams_tokens_and_stops_within_one_when_cancelled() -> None:
    from orchestrion.models.llama_cpp import LlamaCppModel

    model = LlamaCppModel("smollm2")
    try:
        pieces: list[str] = []
        whole = await model.complete([msg("user", "Name three colours.")],
                                     GenerateConfig(max_tokens=24, temperature=0.0, on_text=pieces.append))
        assert len(pieces) > 3 and "".join(pieces) == whole.text

        seen: list[str] = []
        first = threading.Event()

        def on_text(piece: str) -> None:
            seen.append(piece)
            first.set()

        long = asyncio.create_task(model.complete([msg("user", "Count from 1 to 500, one number a line.")],
                                                  GenerateConfig(max_tokens=1000, temperature=0.0, on_text=on_text)))
        assert await asyncio.to_thread(first.wait, 120)
        long.cancel()
        at_cancel = len(seen)
        # the worker holds the model until it stops: the next call finishing shows that it did
        nxt = await asyncio.wait_for(model.complete([msg("user", "Hi")], GenerateConfig(max_tokens=4)), 120)
        assert nxt.text is not None
        assert len(seen) <= at_cancel + 1  # at most the token being sampled when the flag was set
        with pytest.raises(asyncio.CancelledError):
            await long
    finally:
        await model.aclose()
