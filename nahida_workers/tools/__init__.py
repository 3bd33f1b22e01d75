"""nahida_workers.tools."""
