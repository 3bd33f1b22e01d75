"""A provider that falls back to the next one when a provider gives up."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from nahida_workers.core.messages import ProviderRequest, ProviderTurn, ToolCall
from nahida_workers.errors import ProviderError
from nahida_workers.ports import Provider

__all__ = ["FallbackProvider"]

log = logging.getLogger(__name__)


class FallbackProvider:
    """Tries providers in order for each call.

    Each inner provider does its own retries (``providers/retry.py``), so a
    :class:`ProviderError` reaching this class means that provider refused
    (non-retryable) or exhausted its retries: the next one is tried.  Every
    call starts again at the first provider (stateless, so a recovered
    primary is used again).

    ``on_text`` and ``on_tool_call`` are passed to whichever provider is
    tried.  A provider that fails may already have reported tool calls before
    the next one is tried, so ``on_tool_call`` can see calls of a turn that is
    never returned (and, from the next provider, different calls, possibly
    with the same ids).  The runtime bumps its executor epoch in
    ``on_fallback`` and discards every pre-started call the returned turn does
    not contain (DESIGN.md section 3).

    Args:
        providers: primary first; at least one.
        on_fallback: called as ``on_fallback(from_name, to_name)`` just before
            the next provider is tried -- the runtime bumps its executor epoch
            there (DESIGN.md section 3).

    Attributes:
        name / model: those of the provider that answered last (the primary's
            until then), for the run row.
    """

    def __init__(
        self,
        providers: Sequence[Provider],
        *,
        on_fallback: Callable[[str, str], None] | None = None,
    ) -> None:
        if not providers:
            raise ValueError("FallbackProvider needs at least one provider")
        self.providers = tuple(providers)
        self.on_fallback = on_fallback
        self.name = self.providers[0].name
        self.model = self.providers[0].model

    def complete(
        self,
        request: ProviderRequest,
        *,
        on_text: Callable[[str], None] | None = None,
        on_tool_call: Callable[[ToolCall], None] | None = None,
    ) -> ProviderTurn:
        """Return the first successful turn.

        Raises:
            ProviderError: the last provider's error when every provider failed.
        """
        last = len(self.providers) - 1
        for index, provider in enumerate(self.providers):
            try:
                turn = provider.complete(request, on_text=on_text, on_tool_call=on_tool_call)
            except ProviderError as exc:
                if index == last:
                    raise
                following = self.providers[index + 1]
                log.warning(
                    "provider %s failed (%s); falling back to %s",
                    provider.name,
                    exc.failure_code.value,
                    following.name,
                )
                if self.on_fallback is not None:
                    self.on_fallback(provider.name, following.name)
                continue
            self.name, self.model = provider.name, provider.model
            return turn
        raise AssertionError("unreachable: the last provider either returns or raises")
