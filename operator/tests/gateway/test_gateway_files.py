"""Files, authentication and tenancy through the official openai SDK over real HTTP."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from .harness import Service

SFT_ROWS = [
    {
        "messages": [
            {"role": "user", "content": "Repeat a."},
            {"role": "assistant", "content": "a a"},
        ]
    },
    {
        "messages": [
            {"role": "user", "content": "Repeat b."},
            {"role": "assistant", "content": "b b"},
        ]
    },
]


def jsonl(rows: list[dict[str, object]]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


async def test_openapi_document_lists_the_routes(service: Service) -> None:
    async with httpx.AsyncClient() as http:
        doc = (await http.get(f"{service.url}/openapi.json")).json()
    assert doc["info"]["title"] == "RLHF gateway"
    for path in (
        "/v1/files",
        "/v1/files/{file_id}/content",
        "/v1/fine_tuning/jobs",
        "/v1/fine_tuning/jobs/{job_id}/cancel",
        "/v1/models",
    ):
        assert path in doc["paths"], path
    assert "HTTPBearer" in doc["components"]["securitySchemes"]


async def test_upload_list_read_delete_a_file(service: Service) -> None:
    client = service.client("team-a")
    created = await client.files.create(file=("train.jsonl", jsonl(SFT_ROWS)), purpose="fine-tune")
    assert created.id.startswith("file-") and created.filename == "train.jsonl"
    assert created.bytes == len(jsonl(SFT_ROWS)) and created.purpose == "fine-tune"
    # Its record is a ConfigMap in the tenant's namespace, made as the tenant.
    record = service.emulator.get("configmaps", created.id, "team-a")
    assert record["data"]["format"] == "supervised"
    assert record["data"]["location"] == f"pvc://rlhf-files/uploads/team-a/{created.id}.jsonl"
    assert [f.id for f in (await client.files.list()).data] == [created.id]
    assert (await client.files.retrieve(created.id)).bytes == created.bytes
    assert (await client.files.content(created.id)).content == jsonl(SFT_ROWS)
    deleted = await client.files.delete(created.id)
    assert deleted.deleted and deleted.id == created.id
    with pytest.raises(openai.NotFoundError):
        await client.files.retrieve(created.id)


async def test_another_tenants_file_is_not_found(service: Service) -> None:
    mine = await service.client("team-a").files.create(
        file=("t.jsonl", jsonl(SFT_ROWS)), purpose="fine-tune"
    )
    other = service.client("team-b")
    assert (await other.files.list()).data == []
    for call in (other.files.retrieve, other.files.content, other.files.delete):
        with pytest.raises(openai.NotFoundError) as caught:
            await call(mine.id)
        assert caught.value.body["code"] == "not_found"  # type: ignore[index]


async def test_no_or_a_forged_token_is_401(service: Service) -> None:
    with pytest.raises(openai.AuthenticationError) as caught:
        await service.client(None).files.list()
    assert caught.value.status_code == 401
    assert caught.value.body["type"] == "authentication_error"  # type: ignore[index]
    async with httpx.AsyncClient() as http:
        answer = await http.get(f"{service.url}/v1/files")
    assert answer.status_code == 401 and answer.json()["error"]["code"] == "invalid_api_key"


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b'{"messages": []}\nnot json\n', "line 1: messages: must be a non-empty list"),
        (jsonl(SFT_ROWS[:1]) + b"[1, 2]\n", "line 2: each line must be a JSON object"),
        (
            jsonl(SFT_ROWS[:1]) + b'{"messages": [{"role": "user", "content": "x"}]}\n',
            "line 2: messages: needs at least one assistant message",
        ),
        (b'{"prompt": "x"}\n', "line 1: not a fine-tuning row"),
        (jsonl(SFT_ROWS) + b'{"input": {}, "preferred_output": []}\n', "line 3: messages"),
        (b"", "no rows"),
    ],
    ids=[
        "empty-messages",
        "not-an-object",
        "sft-row-without-answer",
        "unknown-row",
        "mixed",
        "empty",
    ],
)
async def test_a_bad_upload_is_a_400_naming_the_line_and_field(
    service: Service, content: bytes, words: str
) -> None:
    client = service.client("team-a")
    with pytest.raises(openai.BadRequestError) as caught:
        await client.files.create(file=("bad.jsonl", content), purpose="fine-tune")
    assert words in caught.value.message and caught.value.body["param"] == "file"  # type: ignore[index]
    assert service.emulator.list("configmaps", "team-a", label_selector="rlhf.dev/file") == []


async def test_oversized_uploads_are_413_and_leave_nothing(tmp_path: object) -> None:
    import pathlib

    from .harness import gateway_service

    async with gateway_service(
        pathlib.Path(str(tmp_path)),
        files={"uri": "pvc://c/p", "mountPath": str(tmp_path), "maxBytes": 100},
    ) as service:
        with pytest.raises(openai.APIStatusError) as caught:
            await service.client("team-a").files.create(
                file=("big.jsonl", jsonl(SFT_ROWS * 10)), purpose="fine-tune"
            )
        assert caught.value.status_code == 413
        assert service.emulator.list("configmaps", "team-a", label_selector="rlhf.dev/file") == []


async def test_files_are_listed_in_pages(service: Service) -> None:
    client = service.client("team-a")
    made = [
        (await client.files.create(file=(f"{i}.jsonl", jsonl(SFT_ROWS)), purpose="fine-tune")).id
        for i in range(3)
    ]
    first = await client.files.list(limit=2, order="asc")
    assert len(first.data) == 2 and first.has_more
    rest = await client.files.list(limit=2, order="asc", after=first.data[-1].id)
    assert {f.id for f in first.data + rest.data} == set(made) and not rest.has_more
    assert sorted([f.id async for f in client.files.list(limit=1)]) == sorted(made)  # SDK paging
    with pytest.raises(openai.BadRequestError) as caught:
        await client.files.list(purpose="batch")
    assert caught.value.body["param"] == "purpose"  # type: ignore[index]
