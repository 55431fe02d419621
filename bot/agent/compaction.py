"""Keeping each model call inside its window: the fitting of :mod:`bot.agent.window` run
before a call, with its one summarizing call, and after a "context too long" refusal
(docs/models.md, "Threads that outgrow the window").

:class:`Fitter` changes the loop's message list in place; a main-agent turn hears each
compaction (:class:`Compacted`) and keeps the summary in its session, the history entries it
covers removed (:mod:`bot.store.summaries`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import openai

from bot.models import tokens
from bot.models import window as fit
from bot.models.completion import ChatModel, CompletionRequest
from bot.runs.naming import Icon
from bot.steps import LoopControl, Meter
from bot.text.sentences import clip_sentences

log = logging.getLogger(__name__)

Message = dict[str, Any]


class ThreadTooLong(Exception):
    """Nothing more can be trimmed and the call still does not fit the model."""


def too_long_text(model: str) -> str:
    """The plain answer of a turn whose thread cannot be made to fit (pure)."""
    return (
        f"{Icon.WARNING} This thread is too long for the model ({model}), even after "
        "summarizing its older turns. Please start a new thread, or ask with less text."
    )


@dataclass(frozen=True, kw_only=True)
class Compacted:
    """A compaction: ``summary`` now stands for ``covered`` (and any earlier summary)."""

    summary: str
    covered: list[Message]


OnCompact = Callable[[Compacted], None]


@dataclass(kw_only=True)
class Fitter:
    """Fits one run's (or turn's) calls; a refusal narrows its window for the calls after."""

    model: ChatModel
    model_name: str
    win: fit.Window | None
    meter: Meter
    control: LoopControl
    on_compact: OnCompact | None = None

    def before_call(self, messages: list[Message], tools: Sequence[Message]) -> None:
        """Trim and compact ``messages`` until the call fits (unknown window: nothing)."""
        if self.win is not None and not self.win.fits(messages, tools):
            self._fit(messages, tools, self.win)

    def after_refusal(
        self, messages: list[Message], tools: Sequence[Message], *, attempt: int
    ) -> None:
        """The server said the request was too long: the first time compact (to three
        quarters of what it refused), the next trim harder; raises :class:`ThreadTooLong`
        when nothing is left to take."""
        refused = tokens.fit_count(messages, tools, model=self._tokenizer, limit=0)
        base = self.win or fit.Window(model=self._tokenizer, limit=refused, reserve=0)
        smaller = base.smaller(refused)
        log.warning(
            "%s refused %d tokens as too long: fitting to %d", self.model_name, refused,
            smaller.room,
        )  # fmt: skip
        if attempt == 0:
            self.win = smaller  # the rest of this run's calls fit what the server takes
            self._fit(messages, tools, smaller, force=True)
            return
        harder = fit.trim_hard(messages)
        if tokens.estimate_messages(harder, tools) >= tokens.estimate_messages(messages, tools):
            raise ThreadTooLong(self.model_name)
        messages[:] = harder

    @property
    def _tokenizer(self) -> str:
        return self.win.model if self.win is not None else self.model_name

    def _fit(
        self,
        messages: list[Message],
        tools: Sequence[Message],
        win: fit.Window,
        *,
        force: bool = False,
    ) -> None:
        new = fit.trim_tool_results(messages)
        if force or not win.fits(new, tools):
            plan = fit.plan_compaction(new, tools, win)
            if plan is not None:
                summary = self._summarize(new, plan, win)
                covered = new[plan.start : plan.end]
                new = fit.apply_compaction(new, plan, summary)
                log.info("%s: %d message(s) compacted into a summary", self.model_name,
                         len(covered))  # fmt: skip
                if self.on_compact is not None:
                    self.on_compact(Compacted(summary=summary, covered=covered))
        if not win.fits(new, tools):
            new = fit.trim_hard(new)
        messages[:] = new
        if not win.fits(new, tools):
            raise ThreadTooLong(self.model_name)

    def _summarize(self, messages: list[Message], plan: fit.Plan, win: fit.Window) -> str:
        """One model call writes the summary; when it fails or says nothing, the material
        itself (the people's words kept longest) stands in, so a turn never fails here."""
        request = fit.summary_request(messages, plan, win)
        text = ""
        budget = self.control.budget
        budget.before_call(model=self.model_name, messages=request, tools=())
        try:
            completion = self.model.complete(
                CompletionRequest(
                    model=self.model_name,
                    messages=request,
                    timeout=self.control.remaining(),
                    budget=self.control.remaining(),
                    on_chunk=lambda: self.meter.touch("summarizing the thread"),
                )
            )
        except openai.APIError as exc:
            budget.after_call(model=self.model_name, usage=None)
            log.warning("summary by %s failed: %s", self.model_name, type(exc).__name__)
        else:
            budget.after_call(model=self.model_name, usage=completion.usage)
            self.meter.usage += completion.usage
            text = completion.content
        if not text.strip():
            covered = messages[plan.start : plan.end]
            text = fit.summary_material(fit.summary_of(messages), covered,
                                        max_chars=win.summary_chars)  # fmt: skip
        return clip_sentences(text, win.summary_chars)
