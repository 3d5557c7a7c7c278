"""Fine-tuning jobs through the official openai SDK: each is one RLHFJob in the tenant's
namespace, made as the tenant; refusals leave nothing behind."""

from __future__ import annotations

import openai
import pytest

from .harness import Service
from .test_gateway_files import SFT_ROWS, jsonl

RLHFJOBS = "rlhfjobs.rlhf.dev"
DPO_ROWS = [
    {
        "input": {"messages": [{"role": "user", "content": "Repeat a."}]},
        "preferred_output": [{"role": "assistant", "content": "a a"}],
        "non_preferred_output": [{"role": "assistant", "content": "b"}],
    }
]


async def upload(client: openai.AsyncOpenAI, rows: list[dict[str, object]]) -> str:
    return (await client.files.create(file=("t.jsonl", jsonl(rows)), purpose="fine-tune")).id


async def test_a_supervised_job_is_one_rlhfjob_in_the_tenants_namespace(service: Service) -> None:
    client = service.client("team-a")
    training = await upload(client, SFT_ROWS)
    job = await client.fine_tuning.jobs.create(
        model="tiny-llama-random",
        training_file=training,
        suffix="repeat",
        seed=3,
        hyperparameters={"n_epochs": 2},
        metadata={"project": "letters"},
    )
    assert job.id.startswith("ftjob-") and job.status == "validating_files"
    assert job.model == "tiny-llama-random" and job.training_file == training
    assert job.organization_id == "team-a" and job.metadata == {"project": "letters"}
    assert job.seed == 3 and job.hyperparameters.n_epochs == 2
    assert job.hyperparameters.batch_size == 16  # what the catalog chose for "auto"
    stored = service.emulator.get(RLHFJOBS, job.id, "team-a")
    assert stored["spec"]["algorithm"]["name"] == "sft"
    assert stored["spec"]["training"]["epochs"] == 2
    assert stored["spec"]["data"]["train"] == [
        {
            "path": f"pvc://rlhf-files/uploads/team-a/{training}.jsonl",
            "split": "train",
            "probability": 1.0,
        }
    ] or stored["spec"]["data"]["train"][0]["path"].endswith(f"{training}.jsonl")
    assert (await client.fine_tuning.jobs.retrieve(job.id)).id == job.id
    # The other tenant sees none of it.
    other = service.client("team-b")
    assert (await other.fine_tuning.jobs.list()).data == []
    with pytest.raises(openai.NotFoundError):
        await other.fine_tuning.jobs.retrieve(job.id)
    with pytest.raises(openai.BadRequestError) as caught:  # nor can it train on the file
        await other.fine_tuning.jobs.create(model="tiny-llama-random", training_file=training)
    assert caught.value.body["param"] == "training_file"  # type: ignore[index]


async def test_a_dpo_job_gets_beta(service: Service) -> None:
    client = service.client("team-a")
    training = await upload(client, DPO_ROWS)
    job = await client.fine_tuning.jobs.create(
        model="tiny-llama-random",
        training_file=training,
        method={"type": "dpo", "dpo": {"hyperparameters": {"beta": 0.25}}},
    )
    spec = service.emulator.get(RLHFJOBS, job.id, "team-a")["spec"]
    assert spec["algorithm"] == {**spec["algorithm"], "name": "dpo", "beta": 0.25}
    assert job.method is not None and job.method.type == "dpo"


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"model": "gpt-4o"}, "model", "not available for fine-tuning"),
        ({"training_file": "file-" + "0" * 24}, "training_file", "no file"),
        ({"method": {"type": "dpo"}}, "training_file", "holds supervised rows"),
        ({"hyperparameters": {"n_epochs": 0}}, "hyperparameters.n_epochs", "greater than 0"),
        (
            {"hyperparameters": {"learning_rate_multiplier": 1000}},
            "hyperparameters.learning_rate_multiplier",
            "less than 1",
        ),
        ({"hyperparameters": {"n_epochs": "many"}}, "hyperparameters.n_epochs", None),
        ({"suffix": "Not OK!"}, "suffix", None),
    ],
    ids=["unknown-model", "unknown-file", "wrong-rows", "epochs", "lr", "not-a-number", "suffix"],
)
async def test_a_refused_job_is_a_400_naming_the_param_and_leaves_nothing(
    service: Service, body: dict[str, object], param: str, words: str | None
) -> None:
    client = service.client("team-a")
    training = await upload(client, SFT_ROWS)
    request = {"model": "tiny-llama-random", "training_file": training, **body}
    with pytest.raises(openai.BadRequestError) as caught:
        await client.fine_tuning.jobs.create(**request)  # type: ignore[arg-type]
    assert caught.value.body["param"] == param  # type: ignore[index]
    if words:
        assert words in caught.value.message
    assert service.emulator.list(RLHFJOBS, "team-a") == []


async def test_cancel_pause_and_resume(service: Service) -> None:
    client = service.client("team-a")
    training = await upload(client, SFT_ROWS)
    paused = await client.fine_tuning.jobs.create(model="tiny-llama-random", training_file=training)
    assert (await client.fine_tuning.jobs.pause(paused.id)).status == "paused"
    assert service.emulator.get(RLHFJOBS, paused.id, "team-a")["spec"]["runPolicy"]["suspend"]
    with pytest.raises(openai.ConflictError):
        await client.fine_tuning.jobs.pause(paused.id)
    assert (await client.fine_tuning.jobs.resume(paused.id)).status == "validating_files"
    assert not service.emulator.get(RLHFJOBS, paused.id, "team-a")["spec"]["runPolicy"]["suspend"]

    cancelled = await client.fine_tuning.jobs.cancel(paused.id)
    assert cancelled.status == "cancelled" and cancelled.finished_at is not None
    for call in (client.fine_tuning.jobs.cancel, client.fine_tuning.jobs.resume):
        with pytest.raises(openai.ConflictError):
            await call(paused.id)
    with pytest.raises(openai.NotFoundError):  # another tenant cannot touch it
        await service.client("team-b").fine_tuning.jobs.cancel(paused.id)


async def test_list_pages_newest_first_and_filters_by_metadata(service: Service) -> None:
    client = service.client("team-a")
    training = await upload(client, SFT_ROWS)
    made = [
        await client.fine_tuning.jobs.create(
            model="tiny-llama-random", training_file=training, metadata={"n": str(i % 2)}
        )
        for i in range(3)
    ]
    ids = {j.id for j in made}
    first = await client.fine_tuning.jobs.list(limit=2)
    assert len(first.data) == 2 and first.has_more
    rest = await client.fine_tuning.jobs.list(limit=2, after=first.data[-1].id)
    assert len(rest.data) == 1 and not rest.has_more
    assert {j.id for j in first.data + rest.data} == ids
    assert len([j async for j in client.fine_tuning.jobs.list(limit=1)]) == 3  # SDK paging
    odd = await client.fine_tuning.jobs.list(metadata={"n": "1"})
    assert [j.id for j in odd.data] == [made[1].id]


async def test_models_list_the_catalog(service: Service) -> None:
    client = service.client("team-a")
    assert [m.id for m in (await client.models.list()).data] == ["tiny-llama-random"]
    assert (await client.models.retrieve("tiny-llama-random")).owned_by == "platform"
    with pytest.raises(openai.NotFoundError):
        await client.models.retrieve("ft:tiny-llama-random:team-b::ftjob-" + "0" * 24)
    with pytest.raises(openai.PermissionDeniedError):
        await client.models.delete("tiny-llama-random")


async def test_a_bad_grader_is_a_400_naming_it(service: Service) -> None:
    client = service.client("team-a")
    rows = [{"messages": [{"role": "user", "content": "Repeat a."}], "answer": "a a"}]
    training = await upload(client, rows)
    grader = {
        "type": "string_check",
        "name": "exact",
        "operation": "equals?",
        "input": "{{sample.output_text}}",
        "reference": "{{item.answer}}",
    }
    with pytest.raises(openai.BadRequestError) as caught:
        await client.fine_tuning.jobs.create(
            model="tiny-llama-random",
            training_file=training,
            method={"type": "reinforcement", "reinforcement": {"grader": grader}},  # type: ignore[typeddict-item]
        )
    assert str(caught.value.body["param"]).startswith("method.reinforcement.grader")  # type: ignore[index]
    assert service.emulator.list(RLHFJOBS, "team-a") == []


async def test_a_job_over_the_namespaces_quota_is_a_429(service: Service) -> None:
    service.emulator.create(
        "resourcequotas",
        {"metadata": {"name": "rlhf"}, "spec": {"hard": {"count/rlhfjobs.rlhf.dev": "1"}}},
        "team-a",
    )
    client = service.client("team-a")
    training = await upload(client, SFT_ROWS)
    await client.fine_tuning.jobs.create(model="tiny-llama-random", training_file=training)
    with pytest.raises(openai.RateLimitError) as caught:
        await client.fine_tuning.jobs.create(model="tiny-llama-random", training_file=training)
    assert caught.value.body["code"] == "quota_exceeded"  # type: ignore[index]
    assert "exceeded quota: rlhf" in caught.value.message
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert len(service.emulator.list(RLHFJOBS, "team-a")) == 1


async def test_each_call_costs_one_token_review_and_the_few_requests_it_needs(
    service: Service,
) -> None:
    """The gateway caches nothing, so its cost on the API server is per call: one TokenReview
    plus the requests the call needs as the tenant, never a scan of other namespaces."""
    client = service.client("team-a")
    training = await upload(client, SFT_ROWS)
    log = service.emulator.requests
    review = ("create", "tokenreviews.authentication.k8s.io")

    mark = log.mark()
    job = await client.fine_tuning.jobs.create(model="tiny-llama-random", training_file=training)
    assert log.counts(since=mark) == {
        review: 1,
        ("get", "configmaps"): 1,  # the training file's record
        ("create", "rlhfjobs.rlhf.dev"): 1,
    }
    for _ in range(5):
        await client.fine_tuning.jobs.create(model="tiny-llama-random", training_file=training)
    for call, expected in (
        (client.fine_tuning.jobs.list(limit=2), {("list", "rlhfjobs.rlhf.dev"): 1}),
        (client.fine_tuning.jobs.retrieve(job.id), {("get", "rlhfjobs.rlhf.dev"): 1}),
        (client.models.list(), {("list", "rlhfjobs.rlhf.dev"): 1}),
        (
            client.fine_tuning.jobs.list_events(job.id),
            {("get", "rlhfjobs.rlhf.dev"): 1, ("list", "events"): 1},
        ),
    ):
        mark = log.mark()
        await call
        assert log.counts(since=mark) == {review: 1, **expected}
    assert {r.namespace for r in log.records if r.resource == "rlhfjobs.rlhf.dev"} == {"team-a"}
