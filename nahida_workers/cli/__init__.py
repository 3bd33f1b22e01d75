"""nahida_workers.cli."""
