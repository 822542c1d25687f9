"""atheris harness: the nsys reader (see runner.py)."""

from runner import main

if __name__ == "__main__":
    main("nsys")
