"""``nahida ask SESSION "question"``: a side conversation about a session."""

from typing import Annotated

import typer

from nahida_workers.cli.common import (
    DEFAULT_DB,
    DbOpt,
    JsonOpt,
    LocalOpt,
    err,
    print_json,
    settings_for,
)

__all__ = ["ask"]


def ask(
    session_id: Annotated[str, typer.Argument(help="The session (id or unique prefix).")],
    question: Annotated[str, typer.Argument(help="The question.")],
    as_json: JsonOpt = False,
    local: LocalOpt = False,
    db: DbOpt = DEFAULT_DB,
) -> None:
    """Ask a session a side question, answered from a copy of its transcript.

    A provider instance of its own (the session's provider config) answers
    from everything the session said and saw so far.  Every tool call in the
    answer is refused; nothing enters the session's transcript or changes its
    task.  The exchange is recorded apart (an artifact; its sha256 is printed).
    ``--local`` asks a session of an embedded (``batch --local``) ledger.
    Exits 3 when the provider fails.
    """
    from dataclasses import asdict

    from nahida_workers.cli.common import ledger_for
    from nahida_workers.cli.ids import resolve
    from nahida_workers.ports import SystemClock
    from nahida_workers.runtime.ownership.driver import loop_config
    from nahida_workers.runtime.side import ask_session
    from nahida_workers.runtime.wiring import provider_for, registry_for

    settings = settings_for(local, db)
    ledger = ledger_for(settings)
    full = resolve(ledger, "session", session_id)
    answer = ask_session(
        ledger,
        full,
        question,
        provider_for=provider_for,
        config_for=lambda spec: loop_config(spec, registry_for(spec, settings)),
        now=SystemClock().now,
    )
    if as_json:
        print_json(asdict(answer))
        return
    typer.echo(answer.answer)
    refused = f"; {len(answer.refused)} tool call(s) refused" if answer.refused else ""
    err().print(
        f"[side conversation: {answer.turns} turn(s){refused}; stop {answer.stop}; "
        f"recorded as {answer.record}]",
        markup=False,
        soft_wrap=True,
    )
