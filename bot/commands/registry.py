"""Every chat command, once: its name, aliases, arguments, one-line help and who may use it.

What reads this table (so a command added here shows up everywhere at once):

- ``/help`` (:data:`HELP_TEXT`) and ``/subagents`` usage lines (:data:`USAGE`);
- the parser's known names (:data:`NAMES`, ``Command.known``);
- Telegram's ``setMyCommands`` menu (:func:`menu`), and which unaddressed ``/cmd`` in a
  group counts as addressed to the bot;
- the Matrix matcher (``!subagents`` / ``/subagents``, :data:`MATCHED`);
- the Slack manifest check (a test compares the manifests' slash commands with
  :func:`slack_slash_commands`).

Pure data with no imports from the rest of ``bot.commands``, so adapters may read it without
loading the run lifecycle.
"""

from __future__ import annotations

from dataclasses import dataclass

LOG_DEFAULT = 20
LOG_MAX = 200

ANYONE = "anyone in the conversation"
CONTROLLER = "the person who started the run, or an admin"


@dataclass(frozen=True, kw_only=True)
class Subcommand:
    """A ``/subagents`` action.

    Attributes:
        name: The action word (``/subagents <name>``).
        args: Its arguments as usage shows them (``<id> [limit] [tools]``).
        help: Its ``/help`` line's text after the dash; None when another line covers it.
        usage: What follows its usage line's syntax; None when another line covers it.
        who: Who may use it.
    """

    name: str
    args: str = ""
    help: str | None = None
    usage: str | None = ""
    who: str = ANYONE

    @property
    def spelled(self) -> str:
        """``/subagents log <id> [limit] [tools]``."""
        return f"/subagents {self.name}" + (f" {self.args}" if self.args else "")


@dataclass(frozen=True, kw_only=True)
class ChatCommand:
    """A top-level chat command.

    Attributes:
        name: ``/name``.
        menu: The one-line description platform menus show (Telegram's ``setMyCommands``).
        help: Its ``/help`` line's text after the dash (None: its subcommands' lines).
        aliases: Other names that do the same (Telegram sends ``/start`` when a person
            first opens the chat).
        slack_slash: Registered as a Slack slash command in the app manifest.
        who: Who may use it.
    """

    name: str
    menu: str
    help: str | None = None
    aliases: tuple[str, ...] = ()
    slack_slash: bool = False
    who: str = ANYONE


SUBAGENTS = (
    Subcommand(name="list", help="runs started in this thread"),
    Subcommand(name="info", args="<id>", help="details of one run"),
    Subcommand(
        name="log",
        args="<id> [limit] [tools]",
        help="its conversation (`tools` adds tool calls)",
        usage=f" (limit 1–{LOG_MAX}, default {LOG_DEFAULT}; `tools` adds tool calls and results)",
    ),
    Subcommand(
        name="send",
        args="<id> <message>",
        help="steer a run, or follow up a finished one",
        who=CONTROLLER,
    ),
    Subcommand(name="stop", args="<id|all>", help="stop runs", who=CONTROLLER),
    Subcommand(
        name="spawn",
        args="[--thread] [--model <model>] [type] <task>",
        help="start a subagent yourself "
        "(`--thread`: in a thread of its own; `/subagents close <id>` unbinds it; "
        "`--model`: e.g. `local/qwen3`)",
        usage=" (`--thread`: in a thread of its own; `--model`: e.g. `local/qwen3`)",
    ),
    Subcommand(name="close", args="<id>", usage=": unbind a child's own thread", who=CONTROLLER),
    Subcommand(
        name="every",
        args="<interval|cron> [type] <task>",
        help="run it on a schedule (`/subagents schedules`, `/subagents unschedule <id>`)",
        usage=", `/subagents schedules`, `/subagents unschedule <id>`",
        who="whoever the `schedules.who` setting allows",
    ),
    Subcommand(name="schedules", usage=None),
    Subcommand(
        name="unschedule",
        args="<id>",
        usage=None,
        who="the person who made the schedule, or an admin (within `schedules.who`)",
    ),
    Subcommand(name="context", usage=": the same as `/context`"),
    Subcommand(name="new", usage=": the same as `/new`"),
    Subcommand(name="model", args="[name]", usage=": the same as `/model`"),
    Subcommand(name="status", usage=": the same as `/status`"),
    Subcommand(name="usage", usage=": the same as `/usage`"),
    Subcommand(name="help", usage=None),
)
"""``/subagents`` actions, in the order ``/help`` and usage list them."""

COMMANDS = (
    ChatCommand(
        name="subagents",
        menu="List, inspect and steer this conversation's subagent runs",
        slack_slash=True,
    ),
    ChatCommand(
        name="stop",
        menu="Stop the running turn and every unfinished subagent here",
        help="stop the current answer and every run of this thread",
        who="anyone; it stops the runs they started (an admin: every run)",
    ),
    ChatCommand(
        name="context",
        menu="How much of the model's window this thread takes, and its summary",
        help="how much of the model's window this thread takes, and the summary of its "
        "older turns (also `/subagents context`)",
    ),
    ChatCommand(
        name="new",
        menu="Start a fresh session in this thread",
        help="a fresh session in this thread: its earlier messages and summary are "
        "forgotten; runs still going keep going and announce here (also `/reset`)",
        aliases=("reset",),
    ),
    ChatCommand(
        name="model",
        menu="Show or switch this thread's model",
        help="this thread's model and the ones you may pick; `/model <name>` switches it "
        "(e.g. `local/qwen3`), `/model default` goes back to the agent's",
        who="anyone, among the allowed models (`FANBOT_MODELS__ALLOWED`); an admin: any "
        "configured model",
    ),
    ChatCommand(
        name="status",
        menu="Model, spend today, runs and budget left",
        help="this thread's model, tokens and cost today, runs going and the daily budget left",
    ),
    ChatCommand(
        name="usage",
        menu="Tokens and cost today, yours and this thread's",
        help="tokens and cost today for you and for this thread, and the thread's total",
    ),
    ChatCommand(name="help", menu="How to talk to the bot", help="this list", aliases=("start",)),
)

NAMES = tuple(c.name for c in COMMANDS)
"""The commands' names, without aliases (what platforms register in their menus)."""
MATCHED = NAMES + tuple(a for c in COMMANDS if c.name != "help" for a in c.aliases)
"""The names adapters recognize as commands: :data:`NAMES` and the aliases people type
(``/reset``; ``/start`` is Telegram's own, sent when a chat opens, so it is left out)."""


def subcommand(name: str) -> Subcommand:
    """The ``/subagents`` action called ``name`` (KeyError for none)."""
    for sub in SUBAGENTS:
        if sub.name == name:
            return sub
    raise KeyError(name)


def menu() -> tuple[tuple[str, str], ...]:
    """``(name, description)`` pairs for Telegram's ``setMyCommands``."""
    return tuple((c.name, c.menu) for c in COMMANDS)


def slack_slash_commands() -> list[str]:
    """The slash commands the Slack app manifests register (``/subagents``)."""
    return [f"/{c.name}" for c in COMMANDS if c.slack_slash]


def _help_text() -> str:
    lines = ["*fanbot commands*"]
    for command in COMMANDS:
        if command.help is None:
            lines += [f"• `{s.spelled}` — {s.help}" for s in SUBAGENTS if s.help is not None]
        else:
            lines.append(f"• `/{command.name}` — {command.help}")
    lines.append(
        "`<id>` is the run's number (`3` or `#3`: the one its status card and announce show), "
        "`last`, a run-id prefix or a session key."
    )
    return "\n".join(lines)


def _usage() -> str:
    lines = ["Usage:"]
    lines += [f"• `{s.spelled}`{s.usage}" for s in SUBAGENTS if s.usage is not None]
    lines.append(
        "`<id>`: the run's number (`3` or `#3`, as its status card and announce show it), "
        "`last`, a run-id prefix or a child session key."
    )
    return "\n".join(lines)


HELP_TEXT = _help_text()
"""The answer to ``/help``."""
USAGE = _usage()
"""The ``/subagents`` usage lines, appended to its error answers."""
