"""The one error type for bad input anywhere in the decision core."""

from __future__ import annotations


class InvalidInput(ValueError):
    """Raised for any invalid input; ``field`` names the offending field.

    Edges translate it: the HTTP extender into a 400 with the message, the CLI into a
    clean exit with the message, trace loaders add the file and line.
    """

    def __init__(self, field: str, value: object, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"invalid {field}={value!r}: {reason}")

    def __reduce__(self) -> tuple[object, tuple[type[InvalidInput], tuple[object, ...], dict[str, object]]]:
        # ValueError's default rebuilds from the message alone, which fails in the parent when a
        # worker process (sweep, Ray) sends one back: rebuild from the message and the fields.
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


def _rebuild(cls: type[InvalidInput], args: tuple[object, ...], fields: dict[str, object]) -> InvalidInput:
    err = cls.__new__(cls)
    err.args = args
    err.__dict__.update(fields)
    return err
