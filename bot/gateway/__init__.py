"""The gateway process: adapters in, ingress (commands, turns), egress and status cards out.

:mod:`~bot.gateway.runtime` holds it together in one event loop and
:mod:`~bot.gateway.starter` starts each adapter on its own. Inbound:
:mod:`~bot.gateway.ingress` (the ordered list of handlers) behind the pure guards of
:mod:`~bot.gateway.admission`, saving attachments through :mod:`~bot.gateway.inbox`.
Outbound: :mod:`~bot.gateway.egress` reads the outbox, one :mod:`~bot.gateway.lane` per
thread, each entry settled by :mod:`~bot.gateway.sender` on the pure decisions of
:mod:`~bot.gateway.delivery`; :mod:`~bot.gateway.thread_opener` opens the threads of
thread-bound children; :mod:`~bot.gateway.status_cards` follows the progress stream.
:mod:`bot.gateway.ops` is the ops page. See ``docs/architecture.md``.
"""
