"""atheris harness: the nccl_tests reader (see runner.py)."""

from runner import main

if __name__ == "__main__":
    main("nccl_tests")
