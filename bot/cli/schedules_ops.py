"""``fanbot schedules list|add|remove``: the operators' view of recurring runs.

Works for any thread without chat access (and without the chat's admin rule: whoever can
reach Redis is an operator). Exit codes: 0 done, 1 no such schedule or a bad schedule,
2 bad configuration or Redis unreachable.
"""

from __future__ import annotations

from typing import Annotated

import typer

from bot.cli.command_group import command_group
from bot.cli.operator_deps import operator_deps
from bot.errors import FanbotError
from bot.runs.recurring import add_schedule
from bot.runs.schedule_spec import every_from_text, parse_every
from bot.sessions import requester_session_key
from bot.store.schedules import NewSchedule
from bot.text.units import utc_stamp
from bot.types import ThreadRef

app = command_group(
    name="schedules", help="List, add and remove recurring subagent runs (reads FANBOT_REDIS_URL)."
)

PROG = "fanbot schedules"


@app.command("list")
def list_schedules() -> None:
    """Every schedule: number, when, next tick, thread, who made it, task."""
    with operator_deps(PROG) as deps:
        found = deps.schedules.all()
        if not found:
            typer.echo("no schedules")
            return
        for s in found:
            t = s.thread
            where = f"{t.platform}:{t.account}:{t.chat}" + (f":{t.thread}" if t.thread else "")
            typer.echo(
                f"#{s.schedule_id:<4} {every_from_text(s.every).describe():<28} "
                f"next {utc_stamp(s.next_time)}  fired {s.fired:<4} {where}  {s.requester}  "
                f"{s.subagent_type or 'general-purpose'}: {s.task}"
            )


@app.command()
def add(
    task: Annotated[str, typer.Argument(help="What each run is asked to do.")],
    every: Annotated[str, typer.Option(help="30m, 2h, 1d or a 5-field cron expression (UTC).")],
    platform: Annotated[str, typer.Option(help="slack, telegram, matrix or console.")],
    chat: Annotated[str, typer.Option(help="Channel, chat id or room id.")],
    account: Annotated[str, typer.Option(help="Slack team, Telegram bot id, Matrix user.")],
    thread: Annotated[str | None, typer.Option(help="Thread id; unset: the main timeline.")] = None,
    subagent_type: Annotated[str, typer.Option("--type", help="Subagent type.")] = "",
    requester: Annotated[
        str, typer.Option(help="platform:user_id the runs are started for (budgets, control).")
    ] = "",
) -> None:
    """Add a schedule announcing into one thread."""
    with operator_deps(PROG) as deps:
        s = deps.settings
        parsed = parse_every(every.split(), min_seconds=s.schedules.min_interval_seconds)
        if isinstance(parsed, str) or parsed[1] != len(every.split()):
            typer.echo(f"fanbot schedules add: --every {every!r}: {parsed if isinstance(parsed, str) else 'extra words'}", err=True)  # fmt: skip
            raise typer.Exit(1)
        where = ThreadRef(platform=platform, account=account, chat=chat, thread=thread or None)
        new = NewSchedule(
            every=parsed[0].text,
            task=task.strip(),
            subagent_type=subagent_type,
            thread=where,
            session_key=requester_session_key(agent_id=s.agent_id, thread=where),
            requester=requester or f"{platform}:operator",
            agent_id=s.agent_id,
        )
        try:
            made = add_schedule(deps, new)
        except FanbotError as exc:
            typer.echo(f"fanbot schedules add: {exc}", err=True)
            raise typer.Exit(1) from None
        typer.echo(f"added schedule #{made.schedule_id}, first at {utc_stamp(made.next_time)}")


@app.command()
def remove(schedule_id: Annotated[str, typer.Argument(help="Schedule number.")]) -> None:
    """Remove a schedule."""
    with operator_deps(PROG) as deps:
        number = schedule_id.strip().removeprefix("#")
        if not deps.schedules.remove(number):
            typer.echo(f"fanbot schedules remove: no schedule #{number}", err=True)
            raise typer.Exit(1)
        typer.echo(f"removed schedule #{number}")
