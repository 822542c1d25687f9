"""Types of the compiled Kineto column reader (``_kineto_native.c``), which mypy cannot read."""

from typing import Any

def reader(rows_hint: int = 0, /) -> object:
    """A new reader of one traceEvents array (an opaque capsule), its columns reserved for ``rows_hint`` rows."""

def feed(reader: object, data: bytes | bytearray | memoryview, /) -> bool:
    """True once the array's closing ``]`` was read."""

def finish(reader: object, /) -> dict[str, Any]:
    """The columns, interned strings and irregular events."""

def take(reader: object, min_rows: int, /) -> dict[str, Any] | None:
    """The rows read so far (finish()'s columns) once there are ``min_rows`` of them; the reader goes on with new columns."""
