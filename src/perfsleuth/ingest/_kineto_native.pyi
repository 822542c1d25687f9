"""Types of the compiled Kineto column reader (``_kineto_native.c``), which mypy cannot read."""

from typing import Any

def reader(rows_hint: int = 0, /) -> object:
    """A new reader of one traceEvents array (an opaque capsule), its columns reserved for ``rows_hint`` rows."""

def feed(reader: object, data: bytes | bytearray | memoryview, /) -> bool:
    """True once the array's closing ``]`` was read."""

def finish(reader: object, /) -> dict[str, Any]:
    """The columns, interned strings and irregular events."""
