"""Every Redis key fanbot writes, in one place.

All keys live under one prefix (``fanbot:`` by default). RQ keeps its own ``rq:`` keys.

=================================================  =========  ================================
key                                                type       what
=================================================  =========  ================================
``{p}run:{runId}``                                 hash       run record (source of truth)
``{p}run:{runId}:hb``                              string     heartbeat, expires when stale
``{p}run:{runId}:stop``                            string     stop flag (checked per step)
``{p}run:{runId}:inbox``                           list       messages for a running run
``{p}runs:active``                                 set        run ids not yet terminal
``{p}runs:all``                                    zset       every run id by created_at
``{p}session:{key}:runs``                          zset       run ids of a session by time (TTL)
``{p}session:{key}:seq``                           string     counter numbering its runs (TTL)
``{p}session:{key}:history``                       list       bounded chat history, JSON (TTL)
``{p}session:{key}:summary``                       hash       its compacted turns' summary (TTL)
``{p}session:{key}:turn_stop``                     string     abort flag for the running turn
``{p}turn:{replyKey}:steps``                       list       a turn's messages after its user message (JSON)
``{p}turn:{replyKey}:hb``                          string     a turn's lease, expires when stale
``{p}turn:{replyKey}:done``                        string     the turn answered (expires)
``{p}turns:inflight``                              hash       reply key -> turn in flight (JSON: job, attempt, state)
``{p}transcript:{sessionId}``                      list       a run's messages (JSON)
``{p}transcript:{sessionId}.deleted.{ts}``         list       archived transcript
``{p}outbox``                                      stream     messages to deliver
``{p}outbox:dead``                                 stream     messages that ran out of retries
``{p}progress``                                    stream     progress events (capped)
``{p}delivered:{idempotencyKey}``                  string     delivered marker (expires)
``{p}sending:{idempotencyKey}``                    string     short lock while a send runs
``{p}parts:{idempotencyKey}``                      hash       part index -> platform id, posted
``{p}gateway:{consumer}:alive``                    string     a gateway's liveness (expires)
``{p}dedupe:{platform}:{eventId}``                 string     inbound event seen (expires)
``{p}status:{runId}``                              hash       status message id per run
``{p}archive:due``                                 zset       run ids by archive time
``{p}stops:pending``                               zset       stopped run ids by hard-stop re-check
``{p}lock:reaper``                                 string     one reaper at a time
``{p}jobs:lost``                                   zset       job ids seen queued in no queue, by first sighting
``{p}fair:slots``                                  zset       run ids holding a subagent slot, by admission
``{p}fair:sessions``                               zset       sessions with runs waiting, by last-served tick
``{p}fair:tick``                                   string     counter behind the last-served ticks
``{p}fair:served``                                 hash       session -> tick of its last admission
``{p}fair:waiting:{sessionKey}``                   list       a session's runs waiting for a slot, in order
``{p}workspace:{sessionKey}``                      hash       session files: path -> bytes, #bytes/#files
``{p}metrics:counters``                            hash       metric series -> count (cluster-wide)
``{p}metrics:histograms``                          hash       metric series|bucket -> count, |sum, |count
``{p}join:{joinId}``                               hash       a fan-in: state, where to continue
``{p}join:{joinId}:runs``                          set        every run that joined it
``{p}join:{joinId}:pending``                       set        its runs not yet ended
``{p}joins:open``                                  zset       joins not yet sealed, by opening time
``{p}joins:ready``                                 zset       fired joins to dispatch, by due time
``{p}session:{key}:joins``                         set        a session's joins not yet continued
``{p}budget:run:{runId}``                          hash       a run's spend: tokens, usd, holds
``{p}budget:tree:{rootRunId}``                     hash       a run tree's spend (same fields)
``{p}budget:thread:{day}:{sessionKey}``            hash       a thread's spend on a UTC day
``{p}budget:user:{day}:{user}``                    hash       a user's spend on a UTC day
``{p}budget:day:{day}``                            set        ``thread|key``/``user|id`` that spent
``{p}schedule:{id}``                               hash       a recurring run: spec, task, thread, next tick
``{p}schedules``                                   zset       schedule ids by next tick
``{p}schedules:seq``                               string     counter numbering the schedules
``{p}run:{runId}:receipts``                        list       receipt ids of the inbox's messages, in order
``{p}receipt:{id}``                                hash       what became of one ``/subagents send``
``{p}approval:{id}``                               hash       a tool call waiting for a person
``{p}approvals:due``                               zset       approval id -> when no answer denies
``{p}estimates:{type}:{model}``                    list       recent finished runs' tokens and cost (capped)
``{p}thread_bind:run:{runId}``                     string     a run's own thread (JSON binding)
``{p}thread_bind:thread:{threadId}``               string     the run bound to a thread
``{p}probe:{who}``                                 string     a Redis health probe's last write
``{p}limit:msgs:{who}:{window}``                   string     messages counted in a minute (``user|id``/``thread|key``)
``{p}limit:notice:{who}:{window}``                 string     the one "slow down" answer of that minute
``{p}limit:places:{what}:{who}``                   zset       run/schedule ids holding a place, by when taken
``{p}sessions:sweep``                              string     the session TTL sweep's SCAN cursor
``{p}sessions:sweep:wait``                         string     set while the next sweep pass (or round) is not due
=================================================  =========  ================================
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PREFIX = "fanbot:"


@dataclass(frozen=True, kw_only=True)
class Keys:
    """Key builder bound to a prefix."""

    prefix: str = DEFAULT_PREFIX

    def run(self, run_id: str) -> str:
        return f"{self.prefix}run:{run_id}"

    def heartbeat(self, run_id: str) -> str:
        return f"{self.prefix}run:{run_id}:hb"

    def stop_flag(self, run_id: str) -> str:
        return f"{self.prefix}run:{run_id}:stop"

    def inbox(self, run_id: str) -> str:
        return f"{self.prefix}run:{run_id}:inbox"

    @property
    def active_runs(self) -> str:
        return f"{self.prefix}runs:active"

    @property
    def all_runs(self) -> str:
        return f"{self.prefix}runs:all"

    def session_runs(self, session_key: str) -> str:
        return f"{self.prefix}session:{session_key}:runs"

    def session_seq(self, session_key: str) -> str:
        return f"{self.prefix}session:{session_key}:seq"

    def history(self, session_key: str) -> str:
        return f"{self.prefix}session:{session_key}:history"

    def session_summary(self, session_key: str) -> str:
        return f"{self.prefix}session:{session_key}:summary"

    def session_model(self, session_key: str) -> str:
        """The thread's own model (``/model``, :mod:`bot.store.thread_models`)."""
        return f"{self.prefix}session:{session_key}:model"

    def turn_stop(self, session_key: str) -> str:
        return f"{self.prefix}session:{session_key}:turn_stop"

    def turn_steps(self, reply_key: str) -> str:
        """What a main-agent turn appended after its user message (a new attempt goes on
        from it, :mod:`bot.store.turn_attempts`)."""
        return f"{self.prefix}turn:{reply_key}:steps"

    def turn_lease(self, reply_key: str) -> str:
        return f"{self.prefix}turn:{reply_key}:hb"

    def turn_done(self, reply_key: str) -> str:
        return f"{self.prefix}turn:{reply_key}:done"

    @property
    def turns_in_flight(self) -> str:
        return f"{self.prefix}turns:inflight"

    def transcript(self, session_id: str) -> str:
        return f"{self.prefix}transcript:{session_id}"

    @property
    def outbox(self) -> str:
        return f"{self.prefix}outbox"

    @property
    def dead_letter(self) -> str:
        return f"{self.prefix}outbox:dead"

    @property
    def progress(self) -> str:
        return f"{self.prefix}progress"

    def delivered(self, idempotency_key: str) -> str:
        return f"{self.prefix}delivered:{idempotency_key}"

    def sending(self, idempotency_key: str) -> str:
        return f"{self.prefix}sending:{idempotency_key}"

    def parts(self, idempotency_key: str) -> str:
        return f"{self.prefix}parts:{idempotency_key}"

    def gateway_alive(self, consumer: str) -> str:
        return f"{self.prefix}gateway:{consumer}:alive"

    def redis_probe(self, who: str) -> str:
        """What :class:`bot.redis.watch.RedisWatch` writes to prove Redis takes writes."""
        return f"{self.prefix}probe:{who}"

    def dedupe(self, platform: str, event_id: str) -> str:
        return f"{self.prefix}dedupe:{platform}:{event_id}"

    def status_message(self, run_id: str) -> str:
        return f"{self.prefix}status:{run_id}"

    @property
    def archive_due(self) -> str:
        return f"{self.prefix}archive:due"

    @property
    def stops_pending(self) -> str:
        return f"{self.prefix}stops:pending"

    @property
    def reaper_lock(self) -> str:
        return f"{self.prefix}lock:reaper"

    @property
    def lost_jobs(self) -> str:
        return f"{self.prefix}jobs:lost"

    @property
    def fair_slots(self) -> str:
        return f"{self.prefix}fair:slots"

    @property
    def fair_sessions(self) -> str:
        return f"{self.prefix}fair:sessions"

    @property
    def fair_tick(self) -> str:
        return f"{self.prefix}fair:tick"

    @property
    def fair_served(self) -> str:
        return f"{self.prefix}fair:served"

    def fair_waiting(self, session_key: str) -> str:
        return f"{self.prefix}fair:waiting:{session_key}"

    def workspace(self, session_key: str) -> str:
        return f"{self.prefix}workspace:{session_key}"

    @property
    def metrics_counters(self) -> str:
        return f"{self.prefix}metrics:counters"

    @property
    def metrics_histograms(self) -> str:
        return f"{self.prefix}metrics:histograms"

    def join(self, join_id: str) -> str:
        return f"{self.prefix}join:{join_id}"

    def join_runs(self, join_id: str) -> str:
        return f"{self.prefix}join:{join_id}:runs"

    def join_pending(self, join_id: str) -> str:
        return f"{self.prefix}join:{join_id}:pending"

    @property
    def joins_open(self) -> str:
        return f"{self.prefix}joins:open"

    @property
    def joins_ready(self) -> str:
        return f"{self.prefix}joins:ready"

    def session_joins(self, session_key: str) -> str:
        return f"{self.prefix}session:{session_key}:joins"

    def budget(self, kind: str, ident: str, day: str = "") -> str:
        """A spend counter (:mod:`bot.store.budgets`); daily kinds carry their day."""
        return f"{self.prefix}budget:{kind}:{day + ':' if day else ''}{ident}"

    def budget_day(self, day: str) -> str:
        return f"{self.prefix}budget:day:{day}"

    def schedule(self, schedule_id: str) -> str:
        return f"{self.prefix}schedule:{schedule_id}"

    @property
    def schedules(self) -> str:
        return f"{self.prefix}schedules"

    @property
    def schedules_seq(self) -> str:
        return f"{self.prefix}schedules:seq"

    def inbox_receipts(self, run_id: str) -> str:
        return f"{self.prefix}run:{run_id}:receipts"

    def receipt(self, receipt_id: str) -> str:
        return f"{self.prefix}receipt:{receipt_id}"

    def approval(self, approval_id: str) -> str:
        return f"{self.prefix}approval:{approval_id}"

    @property
    def approvals_due(self) -> str:
        return f"{self.prefix}approvals:due"

    def estimate_samples(self, subagent_type: str, model: str) -> str:
        """Recent runs of one type and model, for spawn estimates (:mod:`bot.store.estimates`)."""
        return f"{self.prefix}estimates:{subagent_type}:{model}"

    @property
    def session_sweep_cursor(self) -> str:
        """Where the next sweep for session keys without a TTL goes on (a SCAN cursor)."""
        return f"{self.prefix}sessions:sweep"

    def thread_bind_run(self, run_id: str) -> str:
        return f"{self.prefix}thread_bind:run:{run_id}"

    def thread_bind_thread(self, thread_id: str) -> str:
        """``thread_id``: ``platform|account|chat|thread`` (:func:`bot.store.threads.thread_id`)."""
        return f"{self.prefix}thread_bind:thread:{thread_id}"

    def model_limit(self, endpoint: str, part: str) -> str:
        """``part`` (``requests``, ``tokens``, ``paused``) of a model endpoint's shared window
        (:mod:`bot.store.model_limits`)."""
        return f"{self.prefix}model_limit:{endpoint}:{part}"

    def limit_messages(self, who: str, window: int) -> str:
        """Messages ``who`` (``user|platform:id`` or ``thread|sessionKey``) sent in minute
        number ``window`` (:mod:`bot.store.usage`)."""
        return f"{self.prefix}limit:msgs:{who}:{window}"

    def limit_notice(self, who: str, window: int) -> str:
        return f"{self.prefix}limit:notice:{who}:{window}"

    def limit_places(self, what: str, who: str) -> str:
        """What holds one of ``who``'s places (``runs``, ``schedules``)."""
        return f"{self.prefix}limit:places:{what}:{who}"


def glob_escape(text: str) -> str:
    """``text`` with the glob characters of ``SCAN MATCH`` escaped."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
