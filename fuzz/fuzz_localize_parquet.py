"""atheris harness: the localize_parquet reader (see runner.py)."""

from runner import main

if __name__ == "__main__":
    main("localize_parquet")
