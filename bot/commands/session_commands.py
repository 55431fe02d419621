"""``/new`` (alias ``/reset``) and ``/model``: a fresh session in this thread, and this
thread's model (docs/chat-commands.md).

``/new`` forgets the thread's history and summary (the session key stays: it is derived
from where a message is written, :mod:`bot.sessions`); its runs, their numbers and the
thread's model stay, and runs still going announce here as before. ``/model <name>`` keeps
a model for the thread (:mod:`bot.store.thread_models`) that the main agent's turns use
(:func:`bot.models.catalog.main_model`): anyone may pick one of the allowed models
(``FANBOT_MODELS__ALLOWED`` and the agent's own), an admin any configured one.
:func:`parse_model` is pure; no handler raises on user input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bot.commands.context_command import agent_of
from bot.commands.parse import Command
from bot.commands.router import CommandRequest
from bot.models.catalog import allowed_models, configured_models, main_model, qualified
from bot.runs.access import scope_runs
from bot.store.thread_models import MAX_MODEL_CHARS

BACK = frozenset({"default", "reset"})
"""``/model default`` (or ``reset``): back to the agent's model."""
_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]*")
MODEL_USAGE = "`/model` shows this thread's model; `/model <name>` switches it (e.g. " \
    "`/model local/qwen3`); `/model default` goes back to the agent's."  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class ModelRequest:
    """A well-formed ``/model``: show (``name`` ""), go back (``back``) or switch."""

    name: str = ""
    back: bool = False


def parse_model(command: Command) -> ModelRequest | str:
    """Arguments of ``/model`` (or ``/subagents model``) -> a request, or an answer (pure)."""
    args = command.args[1:] if command.name == "subagents" else command.args
    if not args:
        return ModelRequest()
    if len(args) > 1:
        return f"`/model` takes one model name. {MODEL_USAGE}"
    name = args[0]
    if name.lower() in BACK:
        return ModelRequest(back=True)
    if len(name) > MAX_MODEL_CHARS or not _MODEL_NAME.fullmatch(name):
        shown = name[:40].replace("`", "'")
        return f"`{shown}` is not a model name. {MODEL_USAGE}"
    return ModelRequest(name=name)


def handle_model(req: CommandRequest) -> str:
    """Show or switch the thread's model."""
    parsed = parse_model(req.command)
    if isinstance(parsed, str):
        return parsed
    deps, session = req.deps, req.session_key
    settings = deps.settings
    agent_id = agent_of(session) or None
    own = deps.thread_models.get(session)
    allowed = allowed_models(settings, agent_id)
    agents = qualified(settings, main_model(settings, agent_id, None))
    if not parsed.name and not parsed.back:
        return _shown(req, own, agents, allowed)
    if parsed.back:
        if not deps.thread_models.clear(session):
            return f"This thread already uses the agent's model, `{agents}`."
        return f"This thread is back on the agent's model, `{agents}`."
    name = qualified(settings, parsed.name)
    if name not in allowed:
        refused = _refused(req, name, allowed)
        if refused:
            return refused
    if name == agents:
        deps.thread_models.clear(session)
    else:
        deps.thread_models.set(session, name)
    said = f"This thread now uses `{name}`"
    if name == (qualified(settings, own) if own else agents):
        said = f"This thread already uses `{name}`"
    return f"{said}. Answers from the next message on use it; runs already going keep theirs."


def _refused(req: CommandRequest, name: str, allowed: list[str]) -> str:
    """Why ``name`` may not be this thread's model ("" when an admin may set it)."""
    shown = name[:80].replace("`", "'")
    listed = ", ".join(f"`{m}`" for m in allowed)
    if not req.actor.is_admin:
        return (
            f"`{shown}` is not one of the models you may pick here: {listed}. "
            "An admin can set another configured model for this thread."
        )
    if name in configured_models(req.deps.settings):
        return ""
    return (
        f"`{shown}` is not a configured model. Allowed: {listed}; as an admin you may also "
        "pick any model the settings name (`FANBOT_OPENAI__MODELS`, `FANBOT_MODELS__*`)."
    )


def _shown(req: CommandRequest, own: str | None, agents: str, allowed: list[str]) -> str:
    settings = req.deps.settings
    if own:
        lines = [f"This thread's model: `{qualified(settings, own)}` (set with `/model`; "
                 f"the agent's is `{agents}`)."]  # fmt: skip
    else:
        lines = [f"This thread's model: `{agents}` (the agent's)."]
    lines.append("Models you may pick: " + ", ".join(f"`{m}`" for m in allowed) + ".")
    if req.actor.is_admin:
        lines.append("As an admin you may also pick any configured model.")
    lines.append(MODEL_USAGE)
    return "\n".join(lines)


def handle_new(req: CommandRequest) -> str:
    """Forget the thread's history and summary; say what stays."""
    deps, session = req.deps, req.session_key
    forgot = deps.history.clear(session)
    if forgot:
        lines = [f"New session: I forgot this thread's {forgot} earlier message(s)."]
    else:
        lines = ["New session: there was nothing to forget in this thread."]
    going = [r for r in scope_runs(deps, session_key=session, thread=req.inbound.thread)
             if not r.status.terminal]  # fmt: skip
    if going:
        lines.append(f"{len(going)} subagent run(s) still going here keep going and announce here.")
    own = deps.thread_models.get(session)
    if own:
        lines.append(f"The thread keeps its model, `{own}` (`/model default` to go back).")
    return " ".join(lines)
