"""CLI verbs that live outside cli.py (one module per verb family); cli.py registers them."""
