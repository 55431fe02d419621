"""The model endpoints fanbot talks to: which exist (:mod:`.catalog`), how each server
speaks (:mod:`.dialect`), what its failures mean (:mod:`.errors`) and which one answers a
call (:mod:`.router`). docs/architecture.md, "Model endpoints"."""
