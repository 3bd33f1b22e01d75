"""The HTTP API of ``nahida serve`` (FastAPI on uvicorn)."""
