"""Model providers: real adapters over httpx + SSE and the scripted twin.

The mock LLM server and the API payload validators are test support:
:mod:`nahida_workers.testing.mock_server`, :mod:`nahida_workers.testing.validate`.

Wire formats and error translation live here, at the edge (DESIGN.md section 7);
the core only sees :class:`~nahida_workers.core.messages.ProviderTurn` values.
"""

from nahida_workers.errors import PayloadInvalid
from nahida_workers.providers.anthropic import AnthropicProvider
from nahida_workers.providers.anthropic_stream import AnthropicStreamParser, parse_anthropic_message
from nahida_workers.providers.config import ProviderConfig
from nahida_workers.providers.factory import build_provider
from nahida_workers.providers.fallback import FallbackProvider
from nahida_workers.providers.http_errors import ProviderAPIError
from nahida_workers.providers.openai_compat import OpenAICompatProvider
from nahida_workers.providers.openai_stream import OpenAIStreamParser, parse_openai_completion
from nahida_workers.providers.payloads import anthropic_messages_body, openai_chat_body
from nahida_workers.providers.retry import RetryPolicy, call_with_retries
from nahida_workers.providers.scripted import Script, ScriptedProvider, load_script
from nahida_workers.providers.sse import SSEDecoder, SSEEvent

__all__ = [
    "AnthropicProvider",
    "AnthropicStreamParser",
    "FallbackProvider",
    "OpenAICompatProvider",
    "OpenAIStreamParser",
    "PayloadInvalid",
    "ProviderAPIError",
    "ProviderConfig",
    "RetryPolicy",
    "SSEDecoder",
    "SSEEvent",
    "Script",
    "ScriptedProvider",
    "anthropic_messages_body",
    "build_provider",
    "call_with_retries",
    "load_script",
    "openai_chat_body",
    "parse_anthropic_message",
    "parse_openai_completion",
]
