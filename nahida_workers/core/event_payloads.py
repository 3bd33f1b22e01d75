"""Typed event payloads: one frozen model per event type (DESIGN.md section 2).

Every :class:`~nahida_workers.core.events.Event` carries one of these models
as its ``payload``; JSON exists only at the ledger edge.  The ledger adapters
dump a payload with :meth:`EventPayload.as_json` when they write and build it
again with :func:`parse_payload` (validated: a stored row of the wrong shape
raises :class:`~nahida_workers.errors.StoredPayloadError`) when they read.  The
in-memory twin stores the models themselves.

Trusted payloads built inside the process (the core's decisions, the runtime's
commit points) are made with :func:`trusted_payload`, which skips validation
(``model_construct``): the loop builds several per turn and the shapes come
from the code that writes them, which the read-edge validation and the
contract tests check.

Stored JSON is unchanged by the models: a payload keeps exactly the keys it was
built with (unset optional fields are not written), and keys a model does not
name are kept as they were (older rows, test payloads, fields a newer writer
added), so existing ledgers stay readable.  Any text field may hold the
ledger's capped record of a large string (``{capped, head, tail, size,
sha256}``, ``ledger/rules.py``), hence :data:`Text`.

Until every reader uses attributes, a payload also reads like a read-only
mapping (``payload["text"]``, ``payload.get("kind")``, ``"artifact" in
payload``, ``{**payload}``) over the same keys its JSON has.

New event types (a child spawned, a child result adopted, a schedule fired)
add one model below and one entry in :data:`PAYLOAD_MODELS`; new ``control``
kinds (a session parked) add one shape in ``core/control_kinds.py``.  The
ledger edge then checks their shape like every other.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_serializer, model_validator

from nahida_workers.core.control_kinds import CONTROL_SHAPES

__all__ = [
    "PAYLOAD_MODELS",
    "AssistantOutputPayload",
    "ControlPayload",
    "EventPayload",
    "PayloadModel",
    "ProviderAnomalyPayload",
    "TerminalPayload",
    "Text",
    "ToolCallPayload",
    "ToolResultPayload",
    "UserInputPayload",
    "is_cleaned",
    "mark_cleaned",
    "parse_payload",
    "payload_json",
    "trusted_payload",
]

#: A string, or the ledger's capped record of a large one (``ledger/rules.py``).
Text = str | dict[str, Any]


class PayloadModel(BaseModel, Mapping[str, Any]):
    """Base of every event payload: frozen, keeps unknown keys, reads like a mapping.

    The mapping view (and :meth:`as_json`) holds exactly the keys the payload
    was built with: set fields and unknown keys, never unset defaults.
    """

    model_config = ConfigDict(frozen=True, extra="allow")
    event_type: ClassVar[str]  # the ``EventType`` value it belongs to

    def _set_keys(self) -> list[str]:
        fields_set = self.__pydantic_fields_set__
        keys = [k for k in type(self).__pydantic_fields__ if k in fields_set]
        extra = self.__pydantic_extra__
        return keys + list(extra) if extra else keys

    def as_json(self) -> dict[str, Any]:
        """The stored JSON object: the keys this payload was built with."""
        fields_set = self.__pydantic_fields_set__  # the attributes, not the slower properties
        out = {k: self.__dict__[k] for k in type(self).__pydantic_fields__ if k in fields_set}
        extra = self.__pydantic_extra__
        if extra:
            out.update(extra)
        return out

    @model_serializer(mode="plain")
    def _serialise(self) -> dict[str, Any]:
        return self.as_json()

    def __getitem__(self, key: str) -> Any:
        if key in self.__pydantic_fields_set__ and key in type(self).__pydantic_fields__:
            return self.__dict__[key]
        extra = self.__pydantic_extra__
        if extra and key in extra:
            return extra[key]
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        """``payload[key]``, or ``default`` when the payload has no such key."""
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key, _MISSING) is not _MISSING

    def __iter__(self) -> Iterator[str]:  # type: ignore[override]
        return iter(self._set_keys())

    def __len__(self) -> int:
        return len(self._set_keys())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PayloadModel):
            return type(self) is type(other) and self.as_json() == other.as_json()
        if isinstance(other, Mapping):
            return self.as_json() == dict(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


_MISSING = object()


class UserInputPayload(PayloadModel):
    """``user_input``: what the model is told by the user or the runtime.

    ``source`` is ``prompt | steering | correction | repair | inbox | bound``;
    an inbox message adds its ``kind``; a prompt stored as an artifact adds
    ``artifact`` ``{sha256, size, chars, head, tail}`` and ``text`` is its excerpt.
    """

    event_type: ClassVar[str] = "user_input"
    text: Text = ""
    source: str | None = None
    message_id: str | None = None
    kind: str | None = None
    artifact: dict[str, Any] | None = None


class AssistantOutputPayload(PayloadModel):
    """``assistant_output``: one provider turn (``turn`` counts from 0).

    ``usage`` is :class:`~nahida_workers.core.messages.Usage` as a dict;
    ``content_blocks`` are a paused turn's blocks, sent back as-is.
    """

    event_type: ClassVar[str] = "assistant_output"
    text: Text | None = None
    turn: int | None = None
    stop_reason: str | None = None
    raw_stop_reason: Text | None = None
    usage: dict[str, Any] | None = None
    model: Text | None = None
    call_ids: list[str] = []
    refusal: Text | None = None
    content_blocks: list[Any] | None = None


class ToolCallPayload(PayloadModel):
    """``tool_call``: one call the model asked for (``index`` within its turn)."""

    event_type: ClassVar[str] = "tool_call"
    call_id: str | None = None
    name: Text | None = None
    arguments: Any = None
    arguments_error: Text | None = None
    raw_arguments: Text | None = None
    turn: int | None = None
    index: int | None = None


class ToolResultPayload(PayloadModel):
    """``tool_result``: the one result of a call; ``is_error`` iff status is not ok.

    ``reason`` says why a call was not run (e.g. ``doom_loop``).
    """

    event_type: ClassVar[str] = "tool_result"
    call_id: str | None = None
    name: Text | None = None
    status: str | None = None
    content: Text = ""
    is_error: bool | None = None
    synthetic: bool | None = None
    evidence_kind: str | None = None
    reason: str | None = None


class ProviderAnomalyPayload(PayloadModel):
    """``provider_anomaly``: a turn the provider got wrong (``code`` is finite)."""

    event_type: ClassVar[str] = "provider_anomaly"
    code: str | None = None
    detail: Text | None = None
    turn: int | None = None


class ControlPayload(PayloadModel):
    """``control``: a runtime decision on record, named by ``kind``.

    A kind named in ``core/control_kinds.py`` (``correction``, ``repair``,
    ``bound``, ``truncation``, ``stop_hook``, ``recovery``, ``parked``) is
    checked against its shape when validated (the read edge); other kinds
    keep their keys unchecked.
    """

    event_type: ClassVar[str] = "control"
    kind: str | None = None

    @model_validator(mode="after")
    def _kind_has_its_shape(self) -> ControlPayload:
        shape = CONTROL_SHAPES.get(self.kind) if self.kind is not None else None
        if shape is not None:
            shape.model_validate(self.as_json())
        return self


class TerminalPayload(PayloadModel):
    """``terminal``: how the run ended (DESIGN.md section 6).

    A parent that ends names the children it leaves running
    (``children_running``, section 8); a session in its own worktree adds
    the ``commit`` and ``branch`` its changes were committed on, or the
    ``worktree_error`` (``runtime/children/worktree.py``).
    """

    event_type: ClassVar[str] = "terminal"
    state: str | None = None
    reason: str | None = None
    failure_code: str | None = None
    final_text: Text | None = None
    children_running: list[str] | None = None
    commit: str | None = None
    branch: str | None = None
    worktree_error: Text | None = None


EventPayload = (
    UserInputPayload
    | AssistantOutputPayload
    | ToolCallPayload
    | ToolResultPayload
    | ProviderAnomalyPayload
    | ControlPayload
    | TerminalPayload
)

#: The payload model of each ``EventType`` value.  New event types (child
#: spawned, child result adopted, schedule fired, parked) register here.
PAYLOAD_MODELS: Mapping[str, type[PayloadModel]] = {
    model.event_type: model
    for model in (
        UserInputPayload,
        AssistantOutputPayload,
        ToolCallPayload,
        ToolResultPayload,
        ProviderAnomalyPayload,
        ControlPayload,
        TerminalPayload,
    )
}


def trusted_payload(event_type: str, data: Mapping[str, Any]) -> PayloadModel:
    """The payload model of ``event_type`` (an ``EventType``) over ``data``, unvalidated.

    For payloads this process built; ``data`` must already be storable JSON
    (:func:`~nahida_workers.core.values.clean_json`).

    Raises:
        KeyError: ``event_type`` is not an event type.
    """
    return PAYLOAD_MODELS[event_type].model_construct(**data)


#: Payload models built from data ``clean_json`` just returned (by ``Event``),
#: by ``id``; weak, so an entry goes with its payload.  Read through
#: :func:`is_cleaned`, which checks identity: an id reused by another object
#: never counts.
_CLEANED: weakref.WeakValueDictionary[int, PayloadModel] = weakref.WeakValueDictionary()


def mark_cleaned(payload: PayloadModel) -> None:
    """Record that ``payload`` was built from cleaned JSON (``core/values.clean_json``)."""
    _CLEANED[id(payload)] = payload


def is_cleaned(payload: object) -> bool:
    """``payload`` was marked by :func:`mark_cleaned`: storable as it is, not cleaned again.

    A mark, not a field, so payload equality is untouched.
    """
    return _CLEANED.get(id(payload)) is payload


def parse_payload(event_type: str, data: Any) -> PayloadModel:
    """Validate a stored payload (the ledger's read edge).

    Raises:
        KeyError: ``event_type`` is not an event type.
        pydantic.ValidationError: ``data`` is not an object of the type's shape
            (the ledger adapters raise ``StoredPayloadError`` for it).
    """
    return PAYLOAD_MODELS[event_type].model_validate(data)


def payload_json(payload: Mapping[str, Any] | PayloadModel) -> dict[str, Any]:
    """The JSON object to store for ``payload`` (a model, or a plain mapping)."""
    if isinstance(payload, PayloadModel):
        return payload.as_json()
    return dict(payload)
