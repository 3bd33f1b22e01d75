"""``python -m nahida_workers.cli`` == ``nahida``."""

from nahida_workers.cli.main import main

main()
