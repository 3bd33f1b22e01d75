"""The pure core: decisions as values, no Celery/Redis/SQL/httpx, no clock, no env.

An import scan test (``tests/unit/test_core_purity.py``) keeps it so.
"""
