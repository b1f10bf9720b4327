"""Response schemas of the sample-text endpoints (backend/api/routes/sample_texts.py)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class GroupMemberOut(BaseModel):
    """Another sample of the same prompt: its figures and its response's ends."""

    sample_idx: int
    reward: float | None
    response_len: int
    truncated: bool | None
    repeat_period: int | None
    response_chars: int | None
    response_head: str | None = Field(description="The response, or its first PREVIEW characters when longer")
    response_tail: str | None = Field(description="Its last PREVIEW characters when it is longer than 2 x PREVIEW")


class SampleTextOut(BaseModel):
    step: int
    group_idx: int
    sample_idx: int
    validate_: bool | None = Field(serialization_alias="validate")
    prompt: str
    response: str
    gts: str | None
    reward: float | None
    prompt_len: int
    response_len: int
    length_unit: str = Field(description="tokens (the run's tokenizer) or characters")
    truncated: bool | None
    stop_reason: str | None = Field(
        description="The dump's finish_reason / stop_reason, else 'length' (reached max_response_len) or 'stop'; "
        "null: unknown (none recorded, and no token cap to compare the length with)"
    )
    repeat_period: int | None = Field(description="Period of the repetition the response ends in; 0 none")
    extras: dict[str, float | str | None]
    group: list[GroupMemberOut]


class TextMatchOut(BaseModel):
    step: int
    group_idx: int
    sample_idx: int
    reward: float | None
    prompt_len: int
    response_len: int
    repeat_period: int | None
    where: str | None = Field(description="prompt or response: where the phrase was found")
    snippet: str


class TextSearchPage(BaseModel):
    items: list[TextMatchOut]
    total: int
    total_is_lower_bound: bool = False
    indexed: bool = Field(description="The trace's text index was used (else every sample in scope was read)")
    scanned: int = Field(description="Samples whose text was read")
    length_unit: str
