"""atheris harness: the ncu reader (see runner.py)."""

from runner import main

if __name__ == "__main__":
    main("ncu")
