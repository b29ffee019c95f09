"""One way to open a backend: a run's stages, the actor endpoint and a newly added backend all go through it.

Every backend a run opens shares the run's endpoint slots and is closed when the run ends; adding a backend is
one registration (the toy backend below, registered in this file, scores a run).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ceb.backends.base import BACKENDS, open_backend, register_backend
from ceb.backends.openai import OpenAITransport
from ceb.backends.scripted import ScriptedTransport
from ceb.config import BackendConfig, load_config
from ceb.errors import ConfigError
from ceb.pipeline import read_step_rows, run_scoring
from ceb.stages.assembly import actor_chat, build_stages
from tests.support.builders import default_reply, step, trajectory
from tests.support.openai_server import OpenAITestServer, Reply

pytestmark = pytest.mark.anyio

KEY_ENV = "CEB_TEST_ASSEMBLY_KEY"


class _Tracked(OpenAITransport):
    """The openai transport, remembering whether it was closed."""

    closed = False

    async def aclose(self) -> None:
        self.closed = True
        await super().aclose()


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[_Tracked]]:
    """Every ``openai`` transport opened through the registry during the test."""
    monkeypatch.delenv(KEY_ENV, raising=False)
    built: list[_Tracked] = []

    def factory(settings: BackendConfig) -> _Tracked:
        built.append(_Tracked(settings))
        return built[-1]

    real = BACKENDS.get("openai")
    BACKENDS.register("openai", factory)
    yield built
    BACKENDS.register("openai", real)


def _reply(body: dict[str, Any], i: int) -> Reply:
    if body["model"] == "actor-model":  # verbalized: the actor continues its own reply with a confidence
        return Reply(" 80", delay_s=0.02)
    return Reply('{"score": 0.6, "reason": "ok"}', delay_s=0.02)


async def test_the_actor_endpoint_shares_the_runs_slots_and_is_closed_with_the_run(
    openai_server: OpenAITestServer, opened: list[_Tracked], tmp_path: Path
) -> None:
    openai_server.responder = _reply
    config = load_config(
        overrides={
            "backend": {
                "name": "openai",
                "base_url": openai_server.base_url,
                "model": openai_server.model,
                "api_key_env": KEY_ENV,
                "max_concurrency": 1,
                "max_attempts": 1,
            },
            "baselines": {"actor_base_url": openai_server.base_url, "actor_model": "actor-model"},
            "methods": ["static", "verbalized"],
        }
    )
    stream = [trajectory(f"t{i}", step("ls", "a", label=1), step("pwd", "b", label=0)) for i in range(3)]

    summary = await run_scoring({"s": stream}, config, tmp_path)

    assert summary.steps_failed == 0
    rows = list(read_step_rows(tmp_path / "scores.jsonl"))
    assert [r.score for r in rows if r.method == "verbalized"] == pytest.approx([0.8] * 6)
    # One critic backend and one actor backend...
    assert [b.model for b in opened] == [openai_server.model, "actor-model"]
    # ...drawing on the same slots: one request in flight at a time over two concurrent lanes.
    assert openai_server.max_in_flight == 1
    # ...and both closed when the run ended.
    assert all(b.closed for b in opened)


async def test_the_actor_endpoint_is_opened_once_per_stages_and_closed_with_them(
    openai_server: OpenAITestServer, opened: list[_Tracked]
) -> None:
    config = load_config(
        overrides={
            "backend": {"name": "openai", "base_url": openai_server.base_url, "model": "m", "api_key_env": KEY_ENV},
            "baselines": {"actor_model": "actor-model"},
        }
    )
    async with build_stages(config) as stages:
        actor = actor_chat(config, stages)
        assert actor is actor_chat(config, stages) and actor is not stages.chat
        assert isinstance(actor.transport, _Tracked) and actor.endpoint == openai_server.base_url  # the critic's URL
        assert stages.chat is not None and actor.limits is stages.chat.limits  # the run's slots, shared
    assert all(b.closed for b in opened) and len(opened) == 2


def test_without_an_actor_setting_the_actor_is_the_critics_endpoint(openai_server: OpenAITestServer) -> None:
    config = load_config(
        overrides={"backend": {"name": "openai", "base_url": openai_server.base_url, "model": "m"}},
    )
    stages = build_stages(config)
    assert actor_chat(config, stages) is stages.chat


# --- adding a backend: one registration ------------------------------------------------------------------


@pytest.fixture
def toy_backend() -> Iterator[list[ScriptedTransport]]:
    """A backend added in this test: one function registered under ``toy``, built from the ``backend`` section."""
    built: list[ScriptedTransport] = []

    @register_backend("toy")
    def open_toy(settings: BackendConfig) -> ScriptedTransport:
        built.append(ScriptedTransport(default_reply))
        return built[-1]

    yield built
    BACKENDS.unregister("toy")


async def test_a_new_backend_is_one_registration_and_scores_a_run(
    toy_backend: list[ScriptedTransport], tmp_path: Path
) -> None:
    config = load_config(overrides={"backend": {"name": "toy", "max_concurrency": 3}, "methods": ["ceb"]})
    stream = [trajectory(f"t{i}", step("ls", "a", label=1), step("pwd", "b", label=0)) for i in range(2)]

    summary = await run_scoring({"s": stream}, config, tmp_path)

    rows = list(read_step_rows(tmp_path / "scores.jsonl"))
    assert summary.steps_failed == 0 and len(rows) == 4
    assert [r.score for r in rows] == pytest.approx([0.6] * 4)  # default_reply's critic score
    [transport] = toy_backend
    assert {r.stage for r in transport.requests} == {"critic", "hindsight"}
    assert "toy" in BACKENDS.names()
    chat = open_backend(config.backend)  # the client around the transport reads its policy from the same section
    assert chat is not None and isinstance(chat.transport, ScriptedTransport) and chat.max_concurrency == 3


def test_an_unknown_backend_names_the_registered_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown backend 'opneai' \(did you mean 'openai'\?\); choose one of: "):
        open_backend(BackendConfig(name="opneai"))
    assert {"offline", "openai", "vllm"} <= set(BACKENDS.names())


# --- the critics' backend key ------------------------------------------------------------------------------


def test_a_critics_backend_is_read_under_its_new_and_its_old_key_with_a_note() -> None:
    import structlog

    new = load_config(overrides={"critics": [{"name": "a", "backend": "openai"}]})
    with structlog.testing.capture_logs() as logs:
        old = load_config(overrides={"critics": [{"name": "a", "name_backend": "openai"}]})
    assert new == old and old.critic_configs()["a"].backend.name == "openai"
    [note] = [e for e in logs if e["event"] == "config.deprecated_key"]
    assert note["key"] == "critics[].name_backend" and note["use"] == "critics[].backend"
