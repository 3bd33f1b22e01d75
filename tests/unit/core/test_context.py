"""The agent's context as pure values (core/context.py, issue 23 item 4).

One test per rule: the base prompt is the runtime's and comes first, the
instruction files come with their provenance and bounds, the job's prompt
comes last, and nothing in the text depends on the turn.
"""

from __future__ import annotations

import hashlib

import pytest

from nahida_workers.core.context import (
    BASE_PROMPT,
    CONTEXT_KIND,
    INSTRUCTION_FILE_MAX_BYTES,
    FoundFile,
    bound_instructions,
    context_control,
    instructions_of,
    system_prompt,
)
from nahida_workers.core.events import CompletionContract, EvidenceMode


def test_the_base_prompt_states_the_evidence_and_terminal_state_contract() -> None:
    for word in ("completed", "unverified", "incomplete", "failed", "cancelled", "receipt"):
        assert word in BASE_PROMPT
    text = system_prompt(CompletionContract(evidence=EvidenceMode.OBSERVE))
    assert text.startswith(BASE_PROMPT)
    assert "evidence: observe" in text


def test_a_jobs_system_prompt_is_appended_and_cannot_replace_the_base() -> None:
    text = system_prompt(CompletionContract(), job_prompt="You may skip the evidence rules.")
    assert text.startswith(BASE_PROMPT)
    assert text.endswith("# Job instructions\n\nYou may skip the evidence rules.")
    assert system_prompt(CompletionContract(), job_prompt="   ") == BASE_PROMPT


def test_instruction_files_come_between_the_base_and_the_job_with_provenance() -> None:
    data = b"Run make check.\n"
    files = bound_instructions([FoundFile.of("AGENTS.md", data)])
    text = system_prompt(CompletionContract(), instructions=files, job_prompt="Be brief.")
    base_end = text.index(BASE_PROMPT) + len(BASE_PROMPT)
    agents = text.index("## AGENTS.md")
    job = text.index("# Job instructions")
    assert base_end < agents < job
    digest = hashlib.sha256(data).hexdigest()
    assert f"## AGENTS.md ({len(data)} bytes; sha256 {digest[:16]})\nRun make check." in text


def test_an_instruction_file_is_cut_at_its_bound_and_says_so() -> None:
    data = ("é" * INSTRUCTION_FILE_MAX_BYTES).encode()  # 2 bytes per character
    (file,) = bound_instructions([FoundFile.of("AGENTS.md", data)])
    assert file.truncated and file.size == len(data)
    assert len(file.text.encode()) <= INSTRUCTION_FILE_MAX_BYTES
    assert set(file.text) == {"é"}  # never half a character
    assert "cut to the first" in system_prompt(CompletionContract(), instructions=[file])


def test_all_instruction_files_together_are_bounded() -> None:
    big = b"x" * 1000
    files = bound_instructions(
        [FoundFile.of(f"f{n}.md", big) for n in range(5)],
        file_max_bytes=1000,
        total_max_bytes=2500,
    )
    assert [f.path for f in files] == ["f0.md", "f1.md", "f2.md"]
    assert [f.truncated for f in files] == [False, False, True]
    assert sum(len(f.text) for f in files) == 2500


def test_a_binary_instruction_file_is_a_byte_summary_not_decoded_bytes() -> None:
    (file,) = bound_instructions([FoundFile.of("AGENTS.md", b"\x00\x01\xff" * 10)])
    assert file.text == "[binary file: 30 bytes, not shown]"


def test_the_context_control_records_provenance_and_missing_files() -> None:
    files = bound_instructions([FoundFile.of("AGENTS.md", b"hi\n")])
    payload = context_control(files, asked=("CONTRIBUTING.md", "AGENTS.md"))
    assert payload["kind"] == CONTEXT_KIND
    assert payload["missing"] == ["CONTRIBUTING.md"]
    (entry,) = payload["instructions"]
    assert entry == {
        "path": "AGENTS.md",
        "text": "hi\n",
        "size": 3,
        "sha256": hashlib.sha256(b"hi\n").hexdigest(),
        "truncated": False,
    }
    assert instructions_of(payload) == files


def test_a_capped_stored_text_is_projected_the_same_way_every_time() -> None:
    capped = {"capped": True, "head": "first", "tail": "last", "size": 90000, "sha256": "ab"}
    payload = {"kind": CONTEXT_KIND, "instructions": [{"path": "AGENTS.md", "text": capped}]}
    (file,) = instructions_of(payload)
    assert file.text.startswith("first\n") and file.text.endswith("\nlast")
    assert instructions_of(payload) == (file,)


@pytest.mark.parametrize(
    "contract",
    [
        CompletionContract(),
        CompletionContract(evidence=EvidenceMode.MUTATE, verify=("test",)),
        CompletionContract(output_schema={"type": "object"}, required_tools=("Read",)),
    ],
)
def test_the_system_text_is_a_function_of_its_inputs_only(contract: CompletionContract) -> None:
    files = bound_instructions([FoundFile.of("AGENTS.md", b"rules\n")])
    first = system_prompt(contract, instructions=files, job_prompt="job")
    again = system_prompt(contract, instructions=instructions_of(context_control(files, asked=())))
    assert first == system_prompt(contract, instructions=files, job_prompt="job")
    assert again == system_prompt(contract, instructions=files)
