"""``python -m perfsleuth``: the same command as the ``perfsleuth`` script."""

from perfsleuth.cli import main

main()
