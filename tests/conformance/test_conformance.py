"""Each server kind's recorded wire traffic, replayed through fanbot's real client.

Every ``fixtures/<kind>/<case>.json`` (docs/models.md, "Conformance: server kinds ×
features") is served by :class:`~bot.testing.ReplayOpenAI` to
:class:`~bot.agent.llm.OpenAIChatModel` (the real ``openai`` SDK, through its base_url)
configured with that ``kind``; the test checks what the client sent against the fixture's
``request`` and what it read against its ``expect``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest

from bot.agent.llm import OpenAIChatModel
from bot.config import OpenAISettings
from bot.models.completion import Completion, CompletionRequest
from bot.models.errors import Failure, failure_kind
from bot.testing import Fixture, ReplayOpenAI
from bot.testing.fake_openai import RecordedRequest
from bot.testing.replay_openai import load_fixtures

FIXTURES = Path(__file__).parent / "fixtures"
ALL = load_fixtures(FIXTURES)
_MISSING = object()


def _at(body: dict[str, Any], path: str) -> Any:
    """The value at a dotted ``path`` in ``body`` (``_MISSING`` when absent)."""
    value: Any = body
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _run(fixture: Fixture) -> tuple[Completion | BaseException, list[RecordedRequest]]:
    """Replay ``fixture``; returns what the client made of it and the requests it sent."""
    call = fixture.call
    with ReplayOpenAI(fixture.responses, models=(call["model"],)) as server:
        settings = OpenAISettings(
            base_url=server.base_url,
            kind=fixture.kind,  # type: ignore[arg-type]  # the folder is a ServerKind
            max_retries=0,
            request_timeout=10,
            **fixture.settings,
        )
        model = OpenAIChatModel(settings=settings)
        request = CompletionRequest(
            model=call["model"],
            messages=call["messages"],
            tools=call.get("tools") or (),
            thinking=call.get("thinking", ""),
        )
        outcome: Completion | BaseException
        try:
            outcome = model.complete(request)
        except openai.APIError as exc:
            outcome = exc
        finally:
            model.close()
        sent = server.requests
    assert sent, "the client sent nothing"
    return outcome, sent


def _check_request(fixture: Fixture, sent: RecordedRequest) -> list[str]:
    """``fixture.request`` against the request that got the last answer."""
    wanted, body = fixture.request, sent.body
    problems = [f"`{p}` missing" for p in wanted.get("present", ()) if _at(body, p) is _MISSING]
    problems += [f"`{p}` sent" for p in wanted.get("absent", ()) if _at(body, p) is not _MISSING]
    for path, value in (wanted.get("equals") or {}).items():
        got = _at(body, path)
        if got != value:
            problems.append(
                f"`{path}` is {'absent' if got is _MISSING else repr(got)}, not {value!r}"
            )
    return problems


def _check_completion(expect: dict[str, Any], got: Completion) -> list[str]:
    problems: list[str] = []
    for key in ("content", "reasoning", "finish_reason"):
        if key in expect and getattr(got, key) != expect[key]:
            problems.append(f"{key} {getattr(got, key)!r}, expected {expect[key]!r}")
    if "tool_calls" in expect:
        calls = [{"name": c.name, "arguments": _arguments(c.arguments)} for c in got.tool_calls]
        if calls != expect["tool_calls"]:
            problems.append(f"tool calls {calls}, expected {expect['tool_calls']}")
        ids = [c.id for c in got.tool_calls]
        if not all(ids) or len(set(ids)) != len(ids):
            problems.append(f"tool call ids {ids} are not distinct and non-empty")
    for key, value in (expect.get("usage") or {}).items():
        have = getattr(got.usage, key)
        if have != value:
            problems.append(f"usage.{key} {have!r}, expected {value!r}")
    counted = got.usage.prompt_tokens > 0 and got.usage.completion_tokens > 0
    if (expect.get("usage") or {}).get("estimated") and not counted:
        problems.append(f"estimated usage counts nothing: {got.usage}")
    return problems


def _arguments(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw  # shown as it is in the failure message


@pytest.mark.parametrize("fixture", ALL, ids=[f"{f.kind}-{f.case}" for f in ALL])
def test_server_kind_case(fixture: Fixture) -> None:
    outcome, sent = _run(fixture)
    problems = [f"request: {p}" for p in _check_request(fixture, sent[-1])]
    if len(sent) != len(fixture.responses):
        problems.append(f"{len(sent)} requests sent, {len(fixture.responses)} answers recorded")
    expect = dict(fixture.expect)
    if "failure" in expect:
        if not isinstance(outcome, BaseException):
            problems.append(f"answered {outcome!r}, expected the failure {expect['failure']}")
        elif failure_kind(outcome) is not Failure(expect["failure"]):
            problems.append(
                f"failure {failure_kind(outcome)}, expected {expect['failure']} ({outcome!r})"
            )
    elif isinstance(outcome, BaseException):
        problems.append(f"raised {outcome!r}")
    else:
        problems += _check_completion(expect, outcome)
    assert not problems, f"{fixture.kind}/{fixture.case} ({fixture.source}):\n" + "\n".join(
        problems
    )


def test_every_required_kind_has_every_case() -> None:
    """Issue 28's ten kinds have all six cases; other kinds may leave one out (the docs
    table shows it as "—": LM Studio queues rather than saying it is overloaded)."""
    cases = {"plain", "parallel_tools", "streamed_usage", "reasoning"}
    cases |= {"context_too_long", "overloaded"}
    kinds: dict[str, set[str]] = {}
    for fixture in ALL:
        kinds.setdefault(fixture.kind, set()).add(fixture.case)
    required = {"openai", "azure", "openrouter", "litellm", "vllm", "ollama", "llamacpp"}
    required |= {"gemini", "anthropic", "deepseek"}
    assert required <= set(kinds)
    assert {k: sorted(cases - kinds[k]) for k in required if cases - kinds[k]} == {}
