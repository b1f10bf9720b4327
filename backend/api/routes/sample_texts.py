"""Sample texts of rollout dumps: one sample with its prompt, response, reward, lengths,
stop reason and its group's other samples; full-text search over a step or the run,
with filters by reward, length and the repetition flag."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status

from backend.api.deps import SessionDep, TraceDep, require_ready
from backend.api.errors import ERROR_RESPONSES
from backend.api.params import Int4Path, OffsetQuery, StepQuery
from backend.api.schemas import NO_NUL
from backend.api.schemas_text import GroupMemberOut, SampleTextOut, TextMatchOut, TextSearchPage
from backend.formats.rollout_text import unpack
from backend.store.ids import INT4_MAX, INT4_MIN
from backend.store.models import Sample, SampleText, Trace
from backend.store.queries import samples, texts
from backend.store.queries.samples import SampleFilter
from backend.store.text_search import MAX_MATCHES, index_candidates, scan_texts, words

router = APIRouter(prefix="/traces/{trace_id}", tags=["sample texts"], responses=ERROR_RESPONSES)

PREVIEW = 1500  # characters of each end of a group member's response
SNIPPET_HEAD = 180  # characters of a response shown for a match found by filters only
STOP_KEYS = ("finish_reason", "stop_reason")
LengthQuery = Annotated[int | None, Query(ge=INT4_MIN, le=INT4_MAX)]
RewardQuery = Annotated[float | None, Query(allow_inf_nan=False, ge=-1e300, le=1e300)]


def length_unit(trace: Trace) -> str:
    return ((trace.meta or {}).get("rollouts") or {}).get("length_unit") or "tokens"


def _truncated(sample: Sample, trace: Trace) -> bool | None:
    if sample.truncated is not None:
        return sample.truncated
    if trace.max_response_len is None or length_unit(trace) != "tokens":
        return None
    return sample.response_len >= trace.max_response_len


def _stop_reason(extras: dict, truncated: bool | None) -> str | None:
    for key in STOP_KEYS:
        if isinstance(extras.get(key), str):
            return extras[key]
    return None if truncated is None else ("length" if truncated else "stop")


def _member(sample: Sample, text: SampleText | None, trace: Trace) -> GroupMemberOut:
    response = unpack(text.response) if text is not None else None
    long = response is not None and len(response) > 2 * PREVIEW
    return GroupMemberOut(
        sample_idx=sample.sample_idx,
        reward=sample.reward,
        response_len=sample.response_len,
        truncated=_truncated(sample, trace),
        repeat_period=sample.repeat_period,
        response_chars=None if text is None else text.response_chars,
        response_head=response[:PREVIEW] if long and response is not None else response,
        response_tail=response[-PREVIEW:] if long and response is not None else None,
    )


@router.get("/samples/{step}/{group_idx}/{sample_idx}/text", response_model=SampleTextOut)
def sample_text(session: SessionDep, trace: TraceDep, step: Int4Path, group_idx: Int4Path, sample_idx: Int4Path):
    """A dumped sample's prompt and response (as written, never interpreted as markup),
    its figures, and the other samples of its group (their responses' ends)."""
    require_ready(trace)
    owner, key = trace.team_id, (step, group_idx, sample_idx)
    sample, text = texts.sample_with_text(session, team_id=owner, trace_id=trace.id, key=key)
    if sample is None or text is None:
        what = "no such sample" if sample is None else "this sample has no text (no rollout dump holds it)"
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail={"message": f"{what}: {step}.{group_idx}.{sample_idx}"})
    extras = texts.sample_extras(session, team_id=owner, trace_id=trace.id, key=key)
    others, group_texts = texts.group_others(session, team_id=owner, trace_id=trace.id, key=key)
    truncated = _truncated(sample, trace)
    return SampleTextOut(
        step=step,
        group_idx=group_idx,
        sample_idx=sample_idx,
        validate_=sample.validate,
        prompt=unpack(text.prompt),
        response=unpack(text.response),
        gts=text.gts,
        reward=sample.reward,
        prompt_len=sample.prompt_len,
        response_len=sample.response_len,
        length_unit=length_unit(trace),
        truncated=truncated,
        stop_reason=_stop_reason(extras, truncated),
        repeat_period=sample.repeat_period,
        extras=extras,
        group=[_member(o, group_texts.get(o.sample_idx), trace) for o in others],
    )


@router.get("/text-search", response_model=TextSearchPage)
def text_search(
    session: SessionDep,
    trace: TraceDep,
    q: Annotated[
        str, Query(max_length=300, pattern=NO_NUL, description="A phrase (case-insensitive); empty: filters only")
    ] = "",
    step: StepQuery = None,
    reward_min: RewardQuery = None,
    reward_max: RewardQuery = None,
    response_len_min: LengthQuery = None,
    response_len_max: LengthQuery = None,
    repeating: Annotated[bool | None, Query(description="Only responses ending in a repetition (or not)")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: OffsetQuery = 0,
):
    """Samples of a step (or the run) whose prompt or response holds the phrase, passing
    the filters, in (step, group, sample) order."""
    require_ready(trace)
    phrase = q.strip()
    filters = SampleFilter(
        step=step,
        reward_min=reward_min,
        reward_max=reward_max,
        response_len_min=response_len_min,
        response_len_max=response_len_max,
        repeating=repeating,
    )
    passing = samples.text_sample_rows(session, team_id=trace.team_id, trace_id=trace.id, filters=filters)
    rollouts = (trace.meta or {}).get("rollouts") or {}
    indexed = bool(rollouts.get("indexed")) and rollouts.get("indexed") == rollouts.get("samples")
    allowed = set(passing)
    phrase_words = words(phrase)
    use_index = bool(phrase and indexed and phrase_words)
    if use_index:
        allowed &= index_candidates(session.connection(), trace.id, phrase_words, step)
    found: list[tuple[tuple[int, int, int], str | None, str]]
    if phrase:
        steps = sorted({k[0] for k in allowed})
        outcome = scan_texts(session.connection(), trace.id, steps, allowed.__contains__, phrase)
        found = [(m.key, m.where, m.snippet) for m in outcome.matches]
        scanned, complete = outcome.scanned, outcome.complete
    else:
        found = [(k, None, "") for k in sorted(allowed)[:MAX_MATCHES]]
        scanned, complete = 0, len(allowed) <= MAX_MATCHES
    page = found[offset : offset + limit]
    if not phrase:  # no phrase to show around: the responses' beginnings
        heads = _response_heads(session, trace, [key for key, _, _ in page])
        page = [(key, None, heads.get(key, "")) for key, _, _ in page]
    return TextSearchPage(
        items=[_match(passing[key], where, snippet) for key, where, snippet in page],
        total=len(found),
        total_is_lower_bound=not complete,
        indexed=use_index,
        scanned=scanned,
        length_unit=length_unit(trace),
    )


def _response_heads(session, trace: Trace, keys: list) -> dict:
    packed = texts.packed_responses(session, team_id=trace.team_id, trace_id=trace.id, keys=keys)
    out = {}
    for key, blob in packed.items():
        response = unpack(blob)
        out[key] = response[:SNIPPET_HEAD] + ("…" if len(response) > SNIPPET_HEAD else "")
    return out


def _match(row, where: str | None, snippet: str) -> TextMatchOut:
    step, group_idx, sample_idx, reward, prompt_len, response_len, repeat_period = row
    return TextMatchOut(
        step=step,
        group_idx=group_idx,
        sample_idx=sample_idx,
        reward=reward,
        prompt_len=prompt_len,
        response_len=response_len,
        repeat_period=repeat_period,
        where=where,
        snippet=snippet,
    )
