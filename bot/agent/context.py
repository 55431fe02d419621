"""What a tool call knows about where it runs."""

from __future__ import annotations

from dataclasses import dataclass, field

from bot.agent.skills import Skill
from bot.deps import Deps
from bot.hooks.chain import NO_HOOKS, Hooks
from bot.models.completion import ChatModel
from bot.runs.join import JoinPlan
from bot.types import ThreadRef


@dataclass(frozen=True, kw_only=True)
class ToolContext:
    """Passed to every tool.

    Attributes:
        deps: Stores and settings.
        session_key: The session the calling agent serves (requester or child).
        thread: Where answers for this session go.
        requester: ``platform:user_id`` of the person whose message started this work.
        agent_id: The agent doing the work.
        workspace_key: The requester session whose workspace (files) this work shares:
            the main agent's session, and for a subagent the session that spawned it.
        model: The model client, for tools that ask the endpoint (e.g. its model list).
        run_id: Set when the caller is a subagent run.
        spawned: Run ids spawned during this turn (bounded per turn).
        join: The fan-in this turn's spawns wait in (None: no continuation will follow).
        chain_exhausted: Fan-in is on but this turn is the last round of its chain.
        turn_message: The message this turn answers, as the model sees it ("" for a
            subagent): a forked run sees it before the turn has written it to the history.
        hooks: The agent's and the type's ``middleware`` (docs/hooks.md), which the tool
            loop calls around each model and tool call.
    """

    deps: Deps
    session_key: str
    thread: ThreadRef
    requester: str
    agent_id: str
    workspace_key: str = ""
    model: ChatModel | None = None
    run_id: str | None = None
    spawned: list[str] = field(default_factory=list)
    join: JoinPlan | None = None
    chain_exhausted: bool = False
    turn_message: str = ""
    skills: tuple[Skill, ...] = ()
    hooks: Hooks = NO_HOOKS

    @property
    def workspace(self) -> str:
        """The workspace's session key (the calling session when none was given)."""
        return self.workspace_key or self.session_key

    def known_models(self) -> frozenset[str] | None:
        """The models the endpoint lists (None when it cannot say, or there is no client)."""
        return None if self.model is None else self.model.known_models()
