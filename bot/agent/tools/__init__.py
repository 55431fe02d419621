"""Tools the model can call: their schema, safe execution, and the built-in ones.

A tool failure becomes text the model reads ("error: ..."), never a crashed job. Whatever a
tool returns or raises, the text is cut to the caller's limit with a note. Two kinds
of exception are never swallowed: RQ's job timeout and our own run interruptions (stop,
soft deadline) — a broad ``except Exception`` would otherwise eat them.
"""

from __future__ import annotations

import ast
import datetime as dt
import functools
import importlib
import json
import logging
import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, ValidationError
from rq.timeouts import BaseTimeoutException

from bot.agent.tools.json_schema import schema_problem
from bot.errors import ConfigError, RunInterrupted, ToolError
from bot.text.clip import cut_note

if TYPE_CHECKING:
    from bot.agent.context import ToolContext
    from bot.config import Settings

log = logging.getLogger(__name__)

SESSION_TOOLS = frozenset(
    {"sessions_spawn", "sessions_list", "sessions_history", "sessions_send", "agents_list"}
)


class NoArgs(BaseModel):
    pass


class _BadArguments(ValueError):
    """Arguments that do not fit the tool's schema (the message names the problems)."""


@dataclass(frozen=True, kw_only=True)
class Tool:
    """A function the model may call.

    Attributes:
        name: Identifier the model uses.
        description: What it is for, shown to the model.
        args: Pydantic model validating the arguments.
        run: ``(context, validated_args) -> text result``.
        schema_json: A JSON schema given as data (an MCP server's tool). When set, it is
            what the model sees, the arguments are checked against it, and ``run`` gets
            them as a dict; ``args`` is then unused.
        configure: For a tool whose schema depends on the configuration
            (``sessions_spawn`` lists the subagent types): ``settings -> the tool as the
            model sees it``. The tool policy applies it when it hands tools out.
        repeat_safe: Running it twice does no harm (it only reads): a call in flight when
            its worker was lost is run again in the run's next attempt rather than
            reported as interrupted (:mod:`bot.agent.resume`).
        untrusted_output: What it returns comes from outside (a page, a file, an MCP
            server, another session): the tool loop hands it to the model wrapped as
            untrusted data (:func:`bot.text.untrusted.untrusted`), never as instructions.
    """

    name: str
    description: str
    args: type[BaseModel] = NoArgs
    run: Callable[[ToolContext, Any], str]
    schema_json: Mapping[str, Any] | None = None
    configure: Callable[[Settings], Tool] | None = None
    repeat_safe: bool = False
    untrusted_output: bool = False

    def configured(self, settings: Settings) -> Tool:
        """The tool for ``settings`` (itself unless it has ``configure``)."""
        return self if self.configure is None else self.configure(settings)

    def schema(self) -> dict[str, Any]:
        if self.schema_json is not None:
            params = dict(self.schema_json)
        else:
            params = dict(_args_schema(self.args))
        params.pop("title", None)
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": params},
        }


@functools.lru_cache(maxsize=512)
def _args_schema(args: type[BaseModel]) -> dict[str, Any]:
    """An arguments model's JSON schema, built once per process (every run's every step
    asks for it; pydantic rebuilds it on each call)."""
    return args.model_json_schema()


def execute_tool(
    tools: Mapping[str, Tool], *, name: str, arguments: str, ctx: ToolContext, max_chars: int
) -> str:
    """Run one tool call and return the text the model sees, at most ``max_chars`` long
    (plus a note); error texts are bounded too."""
    return _bounded(_execute(tools, name=name, arguments=arguments, ctx=ctx), max_chars)


def _execute(tools: Mapping[str, Tool], *, name: str, arguments: str, ctx: ToolContext) -> str:
    tool = tools.get(name)
    if tool is None:
        return f"error: unknown tool {name!r}; available: {', '.join(sorted(tools)) or 'none'}"
    try:
        raw = json.loads(arguments or "{}")
    except json.JSONDecodeError as exc:
        return f"error: arguments for {name} are not valid JSON ({exc.msg} at {exc.pos})"
    if not isinstance(raw, dict):
        return f"error: arguments for {name} must be a JSON object"
    try:
        args = _arguments(tool, raw)
    except _BadArguments as exc:
        return f"error: invalid arguments for {name}: {exc}"
    try:
        result = tool.run(ctx, args)
    except (BaseTimeoutException, RunInterrupted):
        raise
    except ToolError as exc:
        return f"error: {exc}"
    except Exception as exc:
        log.warning("tool %s raised %s", name, type(exc).__name__, exc_info=True)
        return f"error: {name} failed: {type(exc).__name__}: {exc}"
    return str(result)


def _arguments(tool: Tool, raw: dict[str, Any]) -> Any:
    """What ``tool.run`` gets for ``raw``; raises :class:`_BadArguments` naming the problems."""
    if tool.schema_json is not None:
        problem = schema_problem(tool.schema_json, raw)
        if problem is not None:
            raise _BadArguments(problem)
        return raw
    try:
        return tool.args.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in exc.errors()
        )
        raise _BadArguments(problems) from None


def _bounded(text: str, limit: int) -> str:
    """Cut ``text`` with a note; copies only the kept head (a 10 MB result costs ``limit``)."""
    if len(text) <= limit:
        return text
    return text[:limit] + "\n" + cut_note(len(text) - limit, wording="tool")


class CalculateArgs(BaseModel):
    expression: str = Field(min_length=1, max_length=500, description="Arithmetic, e.g. 2*(3+4)")


_OPS: dict[type, Callable[..., Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def _eval(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 100:
            raise ToolError("exponent too large")
        return _OPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.operand))
    raise ToolError("only numbers and + - * / // % ** ( ) are allowed")


def _calculate(ctx: ToolContext, args: CalculateArgs) -> str:
    try:
        tree = ast.parse(args.expression, mode="eval")
        return str(_eval(tree.body))
    except SyntaxError as exc:
        raise ToolError(f"not an expression: {exc.msg}") from None
    except ZeroDivisionError:
        raise ToolError("division by zero") from None


def _current_time(ctx: ToolContext, args: NoArgs) -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


BUILTIN_TOOLS: tuple[Tool, ...] = (
    Tool(
        name="current_time",
        description="The current date and time in UTC (ISO 8601).",
        args=NoArgs,
        run=_current_time,
        repeat_safe=True,
    ),
    Tool(
        name="calculate",
        description="Evaluate an arithmetic expression exactly.",
        args=CalculateArgs,
        run=_calculate,
        repeat_safe=True,
    ),
)


def load_plugin_tools(paths: Iterable[str]) -> list[Tool]:
    """Import ``module:attribute`` references; each names a Tool or an iterable of Tools."""
    loaded: list[Tool] = []
    for path in paths:
        module_name, _, attr = path.partition(":")
        try:
            obj = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"FANBOT_TOOLS__EXTRA: cannot load {path!r}: {exc}") from exc
        items = [obj] if isinstance(obj, Tool) else list(obj)
        if not all(isinstance(t, Tool) for t in items):
            raise ConfigError(f"FANBOT_TOOLS__EXTRA: {path!r} is not a Tool or list of Tools")
        loaded.extend(items)
    return loaded
