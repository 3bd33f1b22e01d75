"""ProviderConfig, build_provider and the fallback chain."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from pydantic import ValidationError

from nahida_workers.core.events import FailureCode
from nahida_workers.core.messages import ProviderRequest, ProviderTurn, ToolCall, UserMessage
from nahida_workers.errors import ProviderError
from nahida_workers.providers import (
    AnthropicProvider,
    FallbackProvider,
    OpenAICompatProvider,
    ProviderConfig,
    ScriptedProvider,
    build_provider,
)
from tests.unit.providers.helpers import KEY, Recorder

REQUEST = ProviderRequest(run_id="r", turn_index=0, messages=(UserMessage(text="hi"),))


def test_scripted_config_inline_mapping_and_list() -> None:
    for script in ({"turns": [{"text": "hello"}]}, [{"text": "hello"}]):
        provider = build_provider(ProviderConfig(kind="scripted", script=script))
        assert isinstance(provider, ScriptedProvider)
        assert provider.complete(REQUEST).text == "hello"


def test_config_validation() -> None:
    with pytest.raises(ValidationError, match="needs `script`"):
        ProviderConfig(kind="scripted")
    with pytest.raises(ValidationError, match="needs `model`"):
        ProviderConfig(kind="openai")
    with pytest.raises(ValidationError):
        ProviderConfig(kind="openai", model="m", api_key="inline keys are not accepted")  # type: ignore[call-arg]


def test_http_providers_read_the_named_env_var_at_build_time() -> None:
    config = ProviderConfig(kind="anthropic", model="claude-x", api_key_env="MY_KEY", timeout_s=5)
    provider = build_provider(config, env={"MY_KEY": KEY})
    assert isinstance(provider, AnthropicProvider)
    assert provider.base_url == "https://api.anthropic.com" and provider.timeout_s == 5
    assert KEY not in repr(provider) and "api_key=set" in repr(provider)
    unset = build_provider(ProviderConfig(kind="openai", model="gpt-x"), env={})
    assert isinstance(unset, OpenAICompatProvider) and "api_key=unset" in repr(unset)
    assert unset.base_url == "https://api.openai.com/v1"
    assert KEY not in ProviderConfig(kind="openai", model="m").model_dump_json()


def _ok_stream() -> httpx.Response:
    choice = b'{"index":0,"delta":{"content":"from backup"},"finish_reason":"stop"}'
    body = b'data: {"choices":[' + choice + b"]}\n\ndata: [DONE]\n\n"
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)


def test_fallback_after_a_non_retryable_error_reports_the_switch() -> None:
    switches: list[tuple[str, str]] = []
    recorder = Recorder([httpx.Response(401, json={"error": {"type": "auth"}}), _ok_stream()])
    config = ProviderConfig(
        kind="openai",
        name="primary",
        model="gpt-x",
        base_url="http://a.test/v1",
        fallbacks=[
            ProviderConfig(kind="openai", name="backup", model="gpt-y", base_url="http://b.test/v1")
        ],
    )
    provider = build_provider(
        config, env={}, client=recorder.client(), sleep=lambda s: None,
        on_fallback=lambda a, b: switches.append((a, b)),
    )  # fmt: skip
    assert isinstance(provider, FallbackProvider)
    assert provider.complete(REQUEST).text == "from backup"
    assert switches == [("primary", "backup")]
    assert [r.url.host for r in recorder.requests] == ["a.test", "b.test"]
    assert (provider.name, provider.model) == ("backup", "gpt-y")


class _Failing:
    def __init__(self, name: str, *, retryable: bool) -> None:
        self.name, self.model, self.retryable, self.calls = name, name, retryable, 0

    def complete(
        self,
        request: ProviderRequest,
        *,
        on_text: Callable[[str], None] | None = None,
        on_tool_call: Callable[[ToolCall], None] | None = None,
    ) -> ProviderTurn:
        self.calls += 1
        raise ProviderError(
            f"{self.name} down",
            retryable=self.retryable,
            failure_code=FailureCode.PROVIDER_UNAVAILABLE,
        )


def test_fallback_after_exhausted_retries_and_last_error_when_all_fail() -> None:
    a, b = _Failing("a", retryable=True), _Failing("b", retryable=False)
    switches: list[tuple[str, str]] = []
    provider = FallbackProvider([a, b], on_fallback=lambda x, y: switches.append((x, y)))
    with pytest.raises(ProviderError, match="b down"):
        provider.complete(REQUEST)
    assert (a.calls, b.calls, switches) == (1, 1, [("a", "b")])
    with pytest.raises(ValueError):
        FallbackProvider([])


def test_fallback_to_a_scripted_provider() -> None:
    config = ProviderConfig(
        kind="scripted",
        name="broken",
        script=[{"error": {"status": 500, "message": "down"}}],
        fallbacks=[ProviderConfig(kind="scripted", name="ok", script=[{"text": "fine"}])],
    )
    assert build_provider(config).complete(REQUEST).text == "fine"
