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
``{p}session:{key}:runs``                          zset       run ids of a session by time
``{p}session:{key}:seq``                           string     counter numbering its runs
``{p}session:{key}:history``                       list       bounded chat history (JSON)
``{p}session:{key}:turn_stop``                     string     abort flag for the running turn
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
``{p}workspace:{sessionKey}``                      hash       session files: path -> bytes, #bytes/#files
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

    def turn_stop(self, session_key: str) -> str:
        return f"{self.prefix}session:{session_key}:turn_stop"

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

    def workspace(self, session_key: str) -> str:
        return f"{self.prefix}workspace:{session_key}"


def glob_escape(text: str) -> str:
    """``text`` with the glob characters of ``SCAN MATCH`` escaped."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
