"""atheris harness: the inference_bench reader (see runner.py)."""

from runner import main

if __name__ == "__main__":
    main("inference_bench")
