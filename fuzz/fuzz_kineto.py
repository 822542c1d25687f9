"""atheris harness: the kineto reader (see runner.py)."""

from runner import main

if __name__ == "__main__":
    main("kineto")
