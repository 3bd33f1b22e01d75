"""The web view of ``nahida serve``: batches, sessions, runs and a run's SVG timeline."""
