"""RQ job entry points, callbacks, maintenance and the worker launcher."""
