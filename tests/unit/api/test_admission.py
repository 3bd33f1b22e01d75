"""Admission (nahida_workers/api/admission.py) and the 503 mapping (api/guard.py), in process.

A tiny Starlette app behind :class:`Admission`: its routes block on events
the test sets, so "the slot is taken" and "the stream is open" are states the
test controls, not timings.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import psycopg
import pytest
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from nahida_workers.api.admission import Admission, AdmissionLimits
from nahida_workers.api.guard import BUSY_RETRY_AFTER_S, unavailable
from nahida_workers.errors import LedgerUnavailableError

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class World:
    """The app's routes and the events that hold them."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = asyncio.Event()
        self.close_stream = asyncio.Event()
        self.bodies: list[bytes] = []

    async def slow(self, request: Request) -> JSONResponse:
        self.bodies.append(await request.body())
        self.entered.set()
        await self.release.wait()
        return JSONResponse({"ok": True})

    async def fast(self, _request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    async def events(self, _request: Request) -> StreamingResponse:
        async def frames() -> AsyncIterator[bytes]:
            yield b"event: hello\n\n"
            await self.close_stream.wait()

        return StreamingResponse(frames(), media_type="text/event-stream")


def _client(world: World, *, requests: int = 1, streams: int = 1) -> httpx.AsyncClient:
    app = Starlette(
        routes=[
            Route("/slow", world.slow, methods=["GET", "POST"]),
            Route("/fast", world.fast),
            Route("/healthz", world.fast),
            Route("/v1/sessions/s/events", world.events),
        ]
    )
    gated = Admission(
        app,
        limits=AdmissionLimits(requests=requests, queue_timeout_s=0.3, streams=streams),
        exempt=frozenset({"/healthz"}),
        is_stream=lambda path: path.endswith("/events"),
    )
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=gated), base_url="http://t")


async def test_a_request_that_waits_past_the_queue_timeout_gets_503_with_retry_after() -> None:
    world = World()
    async with _client(world) as http:
        holder = asyncio.create_task(http.post("/slow", content=b"first"))
        await world.entered.wait()  # the only slot is taken
        refused = await http.get("/fast")
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == str(BUSY_RETRY_AFTER_S)
        error = refused.json()["error"]
        assert error["code"] == "busy" and "NAHIDA_API_QUEUE_TIMEOUT_S" in error["message"]
        assert (await http.get("/healthz")).status_code == 200  # exempt: no slot needed
        world.release.set()
        assert (await holder).status_code == 200
        assert world.bodies == [b"first"]  # the body read before the slot is replayed whole
        assert (await http.get("/fast")).status_code == 200  # the slot came back


async def test_waiters_are_served_in_turn_when_the_slot_frees_in_time() -> None:
    world = World()
    async with _client(world) as http:
        holder = asyncio.create_task(http.get("/slow"))
        await world.entered.wait()
        waiting = [asyncio.create_task(http.get("/fast")) for _ in range(3)]
        await asyncio.sleep(0)  # queued behind the holder
        world.release.set()
        answers = await asyncio.gather(holder, *waiting)
    assert [a.status_code for a in answers] == [200] * 4


class Exchange:
    """One request driven straight through the ASGI app: what it sent back, as it came."""

    def __init__(self, app: Admission, path: str) -> None:
        self.messages: asyncio.Queue[dict[str, object]] = asyncio.Queue()
        self.disconnect = asyncio.Event()
        scope = {"type": "http", "method": "GET", "path": path, "headers": [], "query_string": b""}
        scope |= {"http_version": "1.1", "scheme": "http", "root_path": ""}
        self.task = asyncio.create_task(app(scope, self._receive, self._send))
        self._sent_body = False

    async def _receive(self) -> dict[str, object]:
        if not self._sent_body:
            self._sent_body = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await self.disconnect.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: dict[str, object]) -> None:
        await self.messages.put(message)

    async def status(self) -> int:
        start = await self.messages.get()
        assert start["type"] == "http.response.start"
        return int(start["status"])  # type: ignore[call-overload]


async def test_a_stream_gives_its_slot_back_when_it_starts_and_streams_are_bounded() -> None:
    # httpx's ASGI transport buffers a whole response, so the open stream is
    # driven through the ASGI interface itself.
    world = World()
    async with _client(world, requests=1, streams=1) as http:
        app = http._transport.app  # type: ignore[attr-defined]
        stream = Exchange(app, "/v1/sessions/s/events")
        assert await stream.status() == 200  # started: it now holds no request slot
        assert (await http.get("/fast")).status_code == 200
        second = await http.get("/v1/sessions/s/events")  # the one stream allowed is open
        assert second.status_code == 503 and "retry-after" in second.headers
        assert "NAHIDA_API_MAX_FOLLOWERS" in second.json()["error"]["message"]
        world.close_stream.set()
        await stream.task
        again = await http.get("/v1/sessions/s/events")  # the ended stream was counted out
        assert again.status_code == 200


def _driver_error(cls: type[BaseException]) -> LedgerUnavailableError:
    """A ledger outage error caused by ``cls`` the way SqlLedger chains it."""
    cause = OperationalError("SELECT 1", {}, cls("canceling statement"))
    try:
        raise LedgerUnavailableError("ledger unavailable") from cause
    except LedgerUnavailableError as exc:
        return exc


@pytest.mark.parametrize(
    "exc",
    [
        PoolTimeout("QueuePool limit of size 8 overflow 4 reached"),
        _driver_error(psycopg.errors.QueryCanceled),
        _driver_error(psycopg.errors.LockNotAvailable),
    ],
    ids=["pool timeout", "statement timeout", "lock timeout"],
)
def test_a_saturated_ledger_is_503_busy_with_retry_after_never_500(exc: BaseException) -> None:
    response = unavailable(exc)
    assert response.status_code == 503
    assert response.headers["retry-after"] == str(BUSY_RETRY_AFTER_S)
    assert b'"busy"' in response.body


def test_an_outage_is_503_with_retry_after_and_a_bug_is_500() -> None:
    down = _driver_error(psycopg.errors.AdminShutdown)
    outage = unavailable(down)
    assert outage.status_code == 503 and b"service_unavailable" in outage.body
    assert int(outage.headers["retry-after"]) > 0
    bug = unavailable(RuntimeError("boom"))
    assert bug.status_code == 500 and "retry-after" not in bug.headers
