"""atheris harness: the tables_parquet reader (see runner.py)."""

from runner import main

if __name__ == "__main__":
    main("tables_parquet")
