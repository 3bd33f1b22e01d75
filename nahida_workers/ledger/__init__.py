"""nahida_workers.ledger."""
