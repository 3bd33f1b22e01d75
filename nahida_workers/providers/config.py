"""Provider configuration: which adapter, where, and what to fall back to.

Loaded at the edge (job spec, settings) and passed to
:func:`~nahida_workers.providers.factory.build_provider`.  The API key is never
part of the config: ``api_key_env`` names the environment variable that holds
it, and the variable is read only when the provider is built.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from nahida_workers.constants import DEFAULT_PROVIDER_API_KEY_ENV, DEFAULT_PROVIDER_BASE_URLS
from nahida_workers.core.messages import ToolChoice

__all__ = ["DEFAULT_API_KEY_ENV", "DEFAULT_BASE_URLS", "ProviderConfig"]

DEFAULT_API_KEY_ENV = DEFAULT_PROVIDER_API_KEY_ENV
DEFAULT_BASE_URLS: dict[str, str] = DEFAULT_PROVIDER_BASE_URLS


class ProviderConfig(BaseModel):
    """One provider and its fallbacks.

    Attributes:
        kind: ``scripted``, ``openai`` (any Chat Completions server) or ``anthropic``.
        name: name recorded on the run row (default: ``kind``).
        base_url: API root; defaults per kind (:data:`DEFAULT_BASE_URLS`).
        model: model name; required for ``openai`` and ``anthropic``.
        api_key_env: NAME of the environment variable holding the key; an
            unset or empty variable means "no key" (local servers).
        timeout_s: seconds for connect and between two received chunks.
        tool_choice: default when a request says ``auto`` (``None``: keep it).
        supports_tools: False -> no tool schemas are ever sent (earlier tool
            calls go as a sourced execution summary, and a contract that
            needs receipts ends ``unverified/no_tool_calling`` at once).
        named_tool_choice: the API accepts a named ``tool_choice`` (the loop
            names a tool when the contract demands one); False: ``required``.
        max_output_tokens: reply cap in tokens when the request sets none.
        max_retries: retries after the first attempt for retryable errors.
        script: for ``scripted``: a file path, YAML/JSON text, a mapping
            (``{"turns": [...]}``) or a list of turns.
        fallbacks: tried in order when this provider fails with a
            non-retryable error or exhausts its retries.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["scripted", "openai", "anthropic"] = "scripted"
    name: str | None = None
    base_url: str | None = None
    model: str | None = None
    api_key_env: str = DEFAULT_API_KEY_ENV
    timeout_s: float = Field(default=60.0, gt=0)
    tool_choice: ToolChoice | None = None
    supports_tools: bool = True
    named_tool_choice: bool = True
    max_output_tokens: int | None = Field(default=None, gt=0)
    max_retries: int = Field(default=2, ge=0)
    script: str | dict[str, Any] | list[Any] | None = None
    fallbacks: list[ProviderConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check_kind(self) -> ProviderConfig:
        if self.kind == "scripted" and self.script is None:
            raise ValueError("a scripted provider needs `script` (a path, text or mapping)")
        if self.kind != "scripted" and not self.model:
            raise ValueError(f"a {self.kind} provider needs `model`")
        return self

    @property
    def resolved_base_url(self) -> str:
        """``base_url`` or the kind's default (empty for ``scripted``)."""
        return self.base_url or DEFAULT_BASE_URLS.get(self.kind, "")
