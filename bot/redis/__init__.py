"""Reaching Redis, the same way in every process (the stores themselves are in :mod:`bot.store`).

:mod:`~bot.redis.url` reads ``FANBOT_REDIS_URL`` as data (no I/O); :mod:`~bot.redis.connect`
builds every Redis client from it; :mod:`~bot.redis.watch` says when Redis is away and when
it is back; :mod:`~bot.redis.server` runs a private ``redis-server`` (the console's, and the
tests').
"""
