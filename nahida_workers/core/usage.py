"""What the fleet spent: token counts the providers reported, and their price.

Pure: values in, values out.  A provider turn's ``assistant_output`` event
carries the usage its provider reported (``core/loop.py``: input, output,
cache-read and cache-write tokens) and the model that answered.
:class:`Tokens` adds turns up; :class:`PriceTable` prices them per model.

The price table is the operator's (``NAHIDA_PRICES_FILE``, read at the
edge): USD per million tokens for each model.  There is no built-in price:
a model the table does not list is *unpriced*, and a total with an unpriced
turn has no cost (``cost_usd: None``, ``unpriced_turns`` counting them) --
a partial sum would read as the whole.  A turn is priced by the model it
reports; a turn that reports none, or a dated snapshot of the run's model
(``gpt-4o-2024-08-06`` of ``gpt-4o``), by the run's model; an entry's
``aliases`` name other reported names.

Cached tokens: Anthropic reports cache reads apart from ``input_tokens``;
OpenAI counts them inside ``prompt_tokens``.  An entry with
``input_includes_cached: true`` (OpenAI-style) prices ``input - cached`` at
the input price and ``cached`` at the cached price.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ModelPrice", "PriceTable", "Tokens", "UsageTally", "turn_tokens"]

#: Tokens per price unit: prices are per million tokens.
PER = 1_000_000
#: A dated snapshot suffix: ``-2024-08-06``, ``-20250929``.
_DATED = re.compile(r"-\d{4}-?\d{2}-?\d{2}$")


@dataclass(frozen=True)
class Tokens:
    """Token counts of some provider turns (tokens, not bytes)."""

    turns: int = 0
    input: int = 0
    output: int = 0
    cached: int = 0
    cache_write: int = 0

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(
            self.turns + other.turns,
            self.input + other.input,
            self.output + other.output,
            self.cached + other.cached,
            self.cache_write + other.cache_write,
        )


def turn_tokens(usage: Mapping[str, Any] | None) -> Tokens:
    """One turn's :class:`Tokens` from its ``assistant_output`` payload's ``usage`` (None: zeros).

    Malformed counts (not non-negative integers) count as 0.
    """

    def count(key: str) -> int:
        value = (usage or {}).get(key, 0)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

    return Tokens(
        1,
        count("input_tokens"),
        count("output_tokens"),
        count("cache_read_tokens"),
        count("cache_write_tokens"),
    )


class ModelPrice(BaseModel):
    """One model's prices, USD per million tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(None, ge=0, description="Default: the input price.")
    cache_write: float | None = Field(None, ge=0, description="Default: the input price.")
    input_includes_cached: bool = False
    aliases: tuple[str, ...] = ()

    def cost(self, tokens: Tokens) -> float:
        """USD for ``tokens`` of this model."""
        uncached = tokens.input - tokens.cached if self.input_includes_cached else tokens.input
        cached_price = self.input if self.cached_input is None else self.cached_input
        write_price = self.input if self.cache_write is None else self.cache_write
        return (
            max(0, uncached) * self.input
            + tokens.cached * cached_price
            + tokens.cache_write * write_price
            + tokens.output * self.output
        ) / PER


class PriceTable(BaseModel):
    """The operator's prices: ``models: {name: ModelPrice}`` (a YAML file's mapping)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    currency: str = "USD"
    models: dict[str, ModelPrice] = Field(default_factory=dict)

    def price_of(self, reported: str | None, run_model: str | None) -> ModelPrice | None:
        """The price of a turn its provider ``reported`` in a run of ``run_model``, or None."""
        by_name = dict(self.models)
        for price in self.models.values():
            for alias in price.aliases:
                by_name.setdefault(alias, price)
        if reported and reported in by_name:
            return by_name[reported]
        if not run_model or run_model not in by_name:
            return None
        if not reported:
            return by_name[run_model]
        rest = reported[len(run_model) :]
        dated = reported.startswith(run_model) and _DATED.fullmatch(rest) is not None
        return by_name[run_model] if dated else None


@dataclass
class UsageTally:
    """Tokens by priced model (None: unpriced), added turn by turn; then totals with cost."""

    table: PriceTable | None = None

    def __post_init__(self) -> None:
        self.tokens = Tokens()
        self.cost = 0.0
        self.unpriced = 0

    def add(self, usage: Mapping[str, Any] | None, *, reported: str | None, run_model: str) -> None:
        """Count one turn (its payload's ``usage`` and ``model``) of a run of ``run_model``."""
        tokens = turn_tokens(usage)
        self.tokens += tokens
        price = self.table.price_of(reported, run_model) if self.table is not None else None
        if price is None:
            self.unpriced += 1
        else:
            self.cost += price.cost(tokens)

    def merge(self, others: Iterable[UsageTally]) -> UsageTally:
        """This tally plus ``others`` (a new tally of the same table)."""
        out = UsageTally(self.table)
        for tally in (self, *others):
            out.tokens += tally.tokens
            out.cost += tally.cost
            out.unpriced += tally.unpriced
        return out

    def as_json(self) -> dict[str, Any]:
        """The totals as JSON.

        Returns:
            ``{"turns", "input_tokens", "output_tokens", "cached_tokens",
            "cache_write_tokens", "cost_usd", "unpriced_turns"}``; ``cost_usd``
            is None without a table or with an unpriced turn.
        """
        t = self.tokens
        priced = self.table is not None and self.unpriced == 0
        return {
            "turns": t.turns,
            "input_tokens": t.input,
            "output_tokens": t.output,
            "cached_tokens": t.cached,
            "cache_write_tokens": t.cache_write,
            "cost_usd": round(self.cost, 6) if priced else None,
            "unpriced_turns": self.unpriced if self.table is not None else 0,
        }
