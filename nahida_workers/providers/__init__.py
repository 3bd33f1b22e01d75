"""nahida_workers.providers."""
