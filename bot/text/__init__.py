"""Text as people read it (pure): cutting to a limit with the one cut note
(:mod:`~bot.text.clip`), markdown split into message-sized chunks (:mod:`~bot.text.chunking`),
durations, sizes, token counts and times (:mod:`~bot.text.units`) and JSON from the network
parsed safely (:mod:`~bot.text.jsonsafe`).
"""
