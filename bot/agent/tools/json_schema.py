"""Tool arguments checked against a JSON schema that arrives as data (an MCP server's).

``jsonschema`` is imported inside the functions: it costs ~90 ms, and only processes that
offer such tools should pay it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def schema_problem(schema: Mapping[str, Any], value: Any) -> str | None:
    """Why ``value`` does not match ``schema`` (its most relevant error), or None if it does.

    A schema that cannot be applied (a dangling ``$ref``, an unknown type) checks nothing:
    the tool's owner validates the arguments again anyway.
    """
    from jsonschema import exceptions, validators
    from referencing.exceptions import Unresolvable

    validator = validators.validator_for(schema)(schema)
    try:
        error = exceptions.best_match(validator.iter_errors(value))
    except (exceptions.UnknownType, Unresolvable):
        return None
    if error is None:
        return None
    where = ".".join(str(part) for part in error.absolute_path) or "arguments"
    return f"{where}: {error.message}"


def invalid_schema(schema: Mapping[str, Any]) -> str | None:
    """Why ``schema`` is not a valid JSON schema under its own metaschema, or None."""
    from jsonschema import exceptions, validators

    try:
        validators.validator_for(schema).check_schema(schema)
    except exceptions.SchemaError as exc:
        return str(exc.message)
    return None
