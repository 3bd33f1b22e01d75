"""nahida_workers.runtime."""
