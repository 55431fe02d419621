from typing import Any

import pytest
from rq.timeouts import JobTimeoutException

from bot.agent.tools import BUILTIN_TOOLS, NoArgs, Tool, execute_tool
from bot.errors import RunStopped

TOOLS = {t.name: t for t in BUILTIN_TOOLS}


def run(name: str, arguments: str, tools: dict[str, Tool] = TOOLS, limit: int = 1000) -> str:
    return execute_tool(tools, name=name, arguments=arguments, ctx=None, max_chars=limit)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("calculate", '{"expression": "2*(3+4)"}', "14"),
        ("calculate", '{"expression": "1/0"}', "error: division by zero"),
        ("calculate", '{"expression": "__import__(\'os\')"}', "error: only numbers"),
        ("calculate", '{"expression": "9**999"}', "error: exponent too large"),
        ("calculate", "{}", "error: invalid arguments for calculate: expression: Field required"),
        ("calculate", '{"expression": ', "error: arguments for calculate are not valid JSON"),
        ("calculate", "[1, 2]", "error: arguments for calculate must be a JSON object"),
        ("nope", "{}", "error: unknown tool 'nope'; available: calculate, current_time"),
    ],
)
def test_tool_errors_are_text_for_the_model(name: str, arguments: str, expected: str) -> None:
    assert run(name, arguments).startswith(expected)


def raising(exc: BaseException) -> dict[str, Tool]:
    def fn(ctx: Any, args: NoArgs) -> str:
        raise exc

    return {"t": Tool(name="t", description="", args=NoArgs, run=fn)}


def test_a_crashing_tool_is_reported_not_raised() -> None:
    assert run("t", "{}", raising(KeyError("k"))) == "error: t failed: KeyError: 'k'"


@pytest.mark.parametrize("exc", [JobTimeoutException("limit"), RunStopped("stop")])
def test_timeouts_and_stops_are_never_swallowed(exc: BaseException) -> None:
    with pytest.raises(type(exc)):
        run("t", "{}", raising(exc))


def test_long_results_are_truncated() -> None:
    tools = {"t": Tool(name="t", description="", args=NoArgs, run=lambda c, a: "y" * 50)}
    assert run("t", "", tools, limit=10) == "y" * 10 + "\n[… truncated: 40 more characters]"


def test_model_retries_are_bounded_by_the_time_left() -> None:
    from bot.agent.llm import retries_within

    assert retries_within(None, 60, 2) == 2  # no deadline: the configured retries
    assert retries_within(1000, 60, 2) == 2
    assert retries_within(130, 60, 2) == 1  # two 60 s attempts fit, not three
    assert retries_within(59, 59, 3) == 0  # one attempt takes all the time left
    assert retries_within(3, 1.5, 3) == 1


@pytest.mark.parametrize(
    ("arguments", "shown"),
    [
        ('{"url": "https://example.com/a"}', "(https://example.com/a)"),
        ('{"command": "ls  -la\\n/tmp"}', "(ls -la /tmp)"),
        ('{"n": 42}', "(42)"),
        ('{"q": "' + "x" * 100 + '"}', "(" + "x" * 39 + "…)"),
        ("{}", ""),
        ("not json", ""),
        ("[1, 2]", ""),
        ('{"code": "`rm`"}', "('rm')"),
    ],
)
def test_a_status_card_shows_the_call_and_a_short_argument(arguments: str, shown: str) -> None:
    from bot.agent.loop import short_args

    assert short_args(arguments) == shown
