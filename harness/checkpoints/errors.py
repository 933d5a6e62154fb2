"""The one error a checkpoint reader raises: file, tensor, what was expected."""
from __future__ import annotations


class CheckpointFormatError(ValueError):
    def __init__(self, where, what: str, expected: str):
        super().__init__(f"{where}: {what}: expected {expected}")
        self.where, self.what, self.expected = str(where), what, expected


def expect_object(where, field: str, value, *, optional: bool = False):
    """`value` when it is a JSON object ({} for an absent optional one); else
    CheckpointFormatError naming the config field and what it is."""
    if value is None and optional:
        return {}
    if not isinstance(value, dict):
        raise CheckpointFormatError(where, field, f"a JSON object, got {type(value).__name__} {value!r:.40}")
    return value
