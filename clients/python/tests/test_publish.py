"""Publishing over HTTP without joining (POST /pods/NAME/envelopes)."""

from __future__ import annotations

import pytest
from conftest import Gateway
from helpers import next_envelope, next_item

import mcpp


async def test_publish_without_joining(gateway: Gateway, pod: str) -> None:
    async with mcpp.connect(gateway.url, pod=pod, participant="alice") as alice:
        one = {"kind": "chat", "payload": {"text": "build green"}}
        [result] = await mcpp.publish(gateway.http, one, pod=pod, participant="ci")
        assert result == {"id": one["id"]}  # the id filled in, as send() does

        results = await mcpp.publish(
            gateway.url + "/ws",  # the WebSocket URL does too
            [
                {"kind": "note", "id": "n1"},
                {"kind": "gateway/history", "payload": {"limit": 1}},
                {"kind": "system/x"},
                {"kind": "note", "id": "n1"},
            ],
            pod=pod,
            participant="ci",
        )
        assert results[0] == {"id": "n1"}
        # The answer's payload (the history may not hold n1 yet: section 6, read-your-writes).
        assert len(results[1]["answer"]["envelopes"]) == 1 and "more" in results[1]["answer"]
        assert mcpp.result_error(results[0]) is None and mcpp.result_error(results[1]) is None
        reserved = mcpp.result_error(results[2])
        assert reserved is not None and reserved.code == "reserved_kind"
        duplicate = mcpp.result_error(results[3])
        assert duplicate is not None and duplicate.code == "duplicate_id" and duplicate.refused_id == "n1"

        # alice saw both envelopes, and nobody join or leave.
        assert (await next_envelope(alice)).kind == "system/welcome"
        chat = await next_item(alice)
        assert isinstance(chat, mcpp.Envelope) and (chat.kind, chat.from_, chat.payload) == ("chat", "ci", {"text": "build green"})
        note = await next_item(alice)
        assert isinstance(note, mcpp.Envelope) and (note.kind, note.id) == ("note", "n1")


async def test_a_refused_publish_is_a_typed_error(gateway: Gateway, token_gateway: Gateway, pod: str) -> None:
    with pytest.raises(mcpp.RefusedError) as no_participant:
        await mcpp.publish(gateway.http, {"kind": "chat"}, pod=pod)
    assert (no_participant.value.status, no_participant.value.code) == (400, "invalid_participant")
    with pytest.raises(mcpp.RefusedError) as bad_pod:
        await mcpp.publish(gateway.http, {"kind": "chat"}, pod="not a pod", participant="ci")
    assert (bad_pod.value.status, bad_pod.value.code) == (400, "invalid_pod")
    with pytest.raises(mcpp.RefusedError) as bad_token:
        await mcpp.publish(token_gateway.http, {"kind": "chat"}, pod="lab", token="wrong")
    assert (bad_token.value.status, bad_token.value.code) == (401, "unauthorized")
    assert "request" in str(bad_token.value)
    [ok] = await mcpp.publish(token_gateway.http, {"kind": "chat"}, pod="lab-2", token="bot-token")
    assert "id" in ok and "error" not in ok
    with pytest.raises(ValueError):
        await mcpp.publish(gateway.http, [], pod=pod, participant="ci")
