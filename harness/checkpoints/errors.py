"""The one error a checkpoint reader raises: file, tensor, what was expected."""
from __future__ import annotations


class CheckpointFormatError(ValueError):
    def __init__(self, where, what: str, expected: str):
        super().__init__(f"{where}: {what}: expected {expected}")
        self.where, self.what, self.expected = str(where), what, expected
