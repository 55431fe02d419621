"""ReplayOpenAI serves recorded answers as they are, in order, and rejects bad fixtures."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest

from bot.testing import Fixture, ReplayOpenAI
from bot.testing.replay_openai import Response

CHUNK = {
    "id": "c1",
    "object": "chat.completion.chunk",
    "created": 1,
    "model": "m",
    "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}],
}


def test_answers_in_order_then_repeats_the_last_and_records_requests() -> None:
    refused = Response(
        status=400, body={"error": {"message": "no", "type": "invalid_request_error"}}
    )
    streamed = Response(events=(": keep-alive", json.dumps(CHUNK), "[DONE]"))
    with ReplayOpenAI([refused, streamed], models=("m",)) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
        for _ in range(2):
            stream = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "b"}], stream=True
            )
            assert [c.choices[0].delta.content for c in stream] == ["hi"]
        assert [m.id for m in client.models.list().data] == ["m"]
        client.close()
        sent = server.requests
    assert [r.body["messages"][0]["content"] for r in sent] == ["a", "b", "b"]
    assert sent[1].body["stream"] is True
    assert sent[0].headers["authorization"] == "Bearer k"


def test_non_json_error_body_is_sent_as_it_is() -> None:
    with ReplayOpenAI(Response(status=502, text="<html>Bad Gateway</html>")) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        with pytest.raises(openai.InternalServerError) as raised:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
        client.close()
    assert raised.value.status_code == 502
    assert raised.value.response.text == "<html>Bad Gateway</html>"


@pytest.mark.parametrize(
    "data, problem",
    [
        ({"call": {"model": "m"}, "response": {}, "expect": {"support": "works"}}, "source"),
        (
            {"source": "s", "call": {"model": "m"}, "response": {}, "expect": {"support": "?"}},
            "support",
        ),
        ({"source": "s", "call": {"model": "m"}, "expect": {"support": "works"}}, "response"),
        (
            {
                "source": "s",
                "call": {"model": "m"},
                "response": {"events": ["{not json", "[DONE]"]},
                "expect": {"support": "works"},
            },
            "Expecting",
        ),
    ],
)
def test_malformed_fixture_is_refused(
    tmp_path: Path, data: dict[str, object], problem: str
) -> None:
    path = tmp_path / "openai" / "bad.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=problem):
        Fixture.load(path)


def test_needs_a_response() -> None:
    with pytest.raises(ValueError):
        ReplayOpenAI([])
