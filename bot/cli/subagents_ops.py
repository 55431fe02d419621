"""``fanbot subagents list|info|stop|usage``: the operators' view of runs, straight from Redis.

Works for any session, without chat access. Exit codes: 0 done, 1 no such run (or an
ambiguous prefix), 2 bad configuration or Redis unreachable.
"""

from __future__ import annotations

import time
from typing import Annotated

import typer

from bot.cli.command_group import command_group
from bot.cli.operator_deps import operator_deps
from bot.commands.answers import render_info, timing
from bot.deps import Deps
from bot.runs.access import MIN_PREFIX
from bot.runs.budget import Limits, run_spend, spend_text, utc_day
from bot.runs.naming import run_name, run_title
from bot.runs.stop import stop_run
from bot.store.budgets import Spend
from bot.types import RunRecord

app = command_group(
    name="subagents", help="Inspect and stop subagent runs of any session (reads FANBOT_REDIS_URL)."
)

PROG = "fanbot subagents"
OPERATOR = "an operator (fanbot subagents stop)"


def find_run(deps: Deps, token: str) -> RunRecord | str:
    """A run by full id or unique prefix (at least 4 characters); else an error text."""
    token = token.strip().lower()
    exact = deps.runs.get(token) if token else None
    if exact is not None:
        return exact
    if len(token) < MIN_PREFIX:
        return f"'{token}' is too short: give a run id or a prefix of {MIN_PREFIX}+ characters"
    hits = [i for i in deps.runs.all_ids() if i.startswith(token)]
    if not hits:
        return f"no run id starts with '{token}'"
    if len(hits) > 1:
        return f"'{token}' matches {len(hits)} runs: {', '.join(h[:12] for h in hits[:8])}"
    record = deps.runs.get(hits[0])
    return record if record is not None else f"run {hits[0]} has no record"


def _plain(text: str) -> str:
    return text.replace("**", "").replace("`", "")


@app.command("list")
def list_runs(
    session: Annotated[
        str | None, typer.Option(help="Only runs spawned from this requester session key.")
    ] = None,
    all_runs: Annotated[bool, typer.Option("--all", help="Include ended runs.")] = False,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="At most this many.")] = 50,
) -> None:
    """Runs, newest first: unfinished ones, or every recent one with --all."""
    with operator_deps(PROG) as deps:
        if session:
            runs = deps.runs.session_runs(session)
        elif all_runs:
            runs = deps.runs.get_many(deps.runs.recent_ids(limit))
        else:
            runs = sorted(deps.runs.get_many(deps.runs.active_ids()), key=lambda r: -r.created_at)
        if not all_runs:
            runs = [r for r in runs if not r.status.terminal]
        runs = runs[:limit]
        if not runs:
            hint = "" if all_runs else " (--all includes ended runs)"
            typer.echo(f"no runs{hint}")
            return
        now = time.time()
        for r in runs:
            typer.echo(
                f"{r.run_id[:12]}  {r.status.value:<8} {run_title(r, noun='', name='none'):<4} "
                f"{timing(r, now):<24} "
                f"{r.session_key}  {run_name(r)}"
            )


def _run_or_exit(deps: Deps, token: str) -> RunRecord:
    """The run ``token`` names, or a one-line error and exit 1."""
    found = find_run(deps, token)
    if isinstance(found, str):
        typer.echo(f"fanbot: {found}", err=True)
        raise typer.Exit(1)
    return found


@app.command()
def info(run: Annotated[str, typer.Argument(help="Run id or unique prefix.")]) -> None:
    """Everything about one run."""
    with operator_deps(PROG) as deps:
        found = _run_or_exit(deps, run)
        text = render_info(
            found,
            now=time.time(),
            transcript_ref=deps.transcripts.current_key(
                found.session_id, archived_at=found.archived_at
            ),
            archive_at=deps.runs.archive_at(found.run_id),
            spend=run_spend(deps, found),
        )
        typer.echo(_plain(text) + f"\n• Session: {found.session_key}")


@app.command()
def stop(run: Annotated[str, typer.Argument(help="Run id or unique prefix.")]) -> None:
    """Stop one run (flag, cancel or finalize, hard stop), as /subagents stop does."""
    with operator_deps(PROG) as deps:
        found = _run_or_exit(deps, run)
        if found.status.terminal:
            typer.echo(f"run {found.run_id[:12]} already ended ({found.status.value})")
            return
        result = stop_run(deps, found.run_id, by=OPERATOR)
        verdict = "stopped" if result.ended else "had just ended on its own"
        hard = " (hard stop sent to its worker)" if result.hard_stop_sent else ""
        typer.echo(f"run {found.run_id[:12]} {verdict}{hard}")


@app.command()
def usage(
    days: Annotated[int, typer.Option(min=1, max=366, help="This many UTC days, today first.")] = 7,
) -> None:
    """Spend per UTC day, per thread and per user (main-agent turns and subagent runs)."""
    with operator_deps(PROG) as deps:
        now = time.time()
        lines: list[str] = []
        for back in range(days):
            day = utc_day(now - back * 86_400)
            rows = deps.budgets.day_usage(day)
            if not rows:
                continue
            threads = [spent for kind, _, spent in rows if kind == "thread"]
            total = Spend(  # every call counts toward exactly one thread
                tokens=sum(s.tokens for s in threads), usd=sum(s.usd for s in threads)
            )
            lines.append(f"{day}  total {spend_text(total, Limits())}")
            for kind, ident, spent in rows:
                limit = _daily_limits(deps, kind)
                lines.append(f"  {kind:<6} {spend_text(spent, limit)}  {ident}")
        typer.echo("\n".join(lines) if lines else f"no spend recorded in the last {days} day(s)")


def _daily_limits(deps: Deps, kind: str) -> Limits:
    b = deps.settings.budgets
    if kind == "thread":
        return Limits(tokens=b.thread_daily_tokens, usd=b.thread_daily_usd)
    return Limits(tokens=b.user_daily_tokens, usd=b.user_daily_usd)
