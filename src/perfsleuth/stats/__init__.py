"""Statistics that a performance engineer can trust (intervals, not bare means)."""
