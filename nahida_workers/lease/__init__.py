"""nahida_workers.lease."""
