"""API keys never reach a log line: redaction of fields, messages and exceptions in the rendered output."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
import structlog

from ceb import logs
from ceb.errors import BackendError, ConfigError
from ceb.logs import REDACTED, configure_logging, muted, redact_secrets, register_secret, register_secret_env

# Does not look like a key to any pattern: only registration can catch it.
PLAIN_SECRET = "zq7-plain-looking-value-4411"
OPENAI_KEY = "sk-proj-4fT9xQ2mB7vL0pR8sK3nW6yZ1cD5hJ"
BEARER = "eyJhbGciOiJIUzI1NiJ9.payload.signature"


@pytest.fixture(autouse=True)
def clean_logging(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test gets an empty secret registry and leaves structlog and the root logger as it found them."""
    monkeypatch.setattr(logs, "_secrets", logs._Secrets())
    saved = structlog.get_config()
    root = logging.getLogger()
    handlers = list(root.handlers)
    yield
    structlog.configure(**saved)
    for h in list(root.handlers):
        if h not in handlers:
            root.removeHandler(h)


def render(event: str = "e", **fields: Any) -> str:
    """Run one event through a chain ending in ``redact_secrets`` and a renderer that writes to a StringIO."""
    out = io.StringIO()
    log = structlog.wrap_logger(
        structlog.PrintLogger(out),
        processors=[redact_secrets, structlog.processors.KeyValueRenderer(sort_keys=True)],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
    )
    log.info(event, **fields)
    return out.getvalue()


def test_secret_fields_are_redacted_and_ordinary_fields_kept() -> None:
    line = render(
        event="calling the endpoint",
        api_key="k" * 12,
        Authorization=f"Bearer {BEARER}",
        headers={"X-Api-Key": "abc123456", "Accept": "application/json"},
        OPENAI_API_KEY="whatever-it-is",
        max_tokens=160,
        prompt_tokens=1234,
        api_key_env="OPENAI_API_KEY",
    )

    assert "k" * 12 not in line and BEARER not in line and "abc123456" not in line and "whatever-it-is" not in line
    assert f"api_key='{REDACTED}'" in line and f"Authorization='{REDACTED}'" in line
    assert f"'X-Api-Key': '{REDACTED}'" in line and "'Accept': 'application/json'" in line
    assert "max_tokens=160" in line and "prompt_tokens=1234" in line and "api_key_env='OPENAI_API_KEY'" in line


@pytest.mark.parametrize(
    "name",
    [
        "api_key",
        "API_KEY",
        "apiKey",
        "x-api-key",
        "authorization",
        "Authorization",
        "token",
        "access_token",
        "refreshToken",
        "key",
        "password",
        "db_password",
        "password_hash",
        "secret",
        "client_secret",
        "credentials",
        "cookie",
    ],
)
def test_names_that_look_secret(name: str) -> None:
    assert f"{name}='{REDACTED}'" in render(**{name: "value-1"})


@pytest.mark.parametrize(
    "name", ["max_tokens", "prompt_tokens", "token_count", "api_key_env", "keys", "keyboard", "monkey", "stream"]
)
def test_names_that_do_not_look_secret(name: str) -> None:
    assert f"{name}='value-1'" in render(**{name: "value-1"})


@pytest.mark.parametrize(
    ("message", "kept"),
    [
        (f"retrying with Authorization: Bearer {BEARER}", "Authorization: Bearer [REDACTED]"),
        (f"the key {OPENAI_KEY} was refused", "the key [REDACTED] was refused"),
        ("GET /v1/models?api_key=abcdef123456&x=1", "?api_key=[REDACTED]&x=1"),
        ('config {"password": "hunter2hunter2"}', '{"password": "[REDACTED]"}'),
        ("token=tok_5f9a8b7c secret: s3cr3t-v4lue", "token=[REDACTED] secret: [REDACTED]"),
        ("hf_abcdefghijklmnopqrstuvwxyz0123 in HF_TOKEN", "[REDACTED] in HF_TOKEN"),
        ("used 1200 prompt tokens and max_tokens=160", "used 1200 prompt tokens and max_tokens=160"),
    ],
)
def test_secrets_inside_strings_are_redacted(message: str, kept: str) -> None:
    line = render(event=message, errors=[message])

    assert kept in line
    assert line.count(kept) == 2  # in the message and in the list field


def test_a_registered_secret_is_redacted_wherever_it_appears() -> None:
    register_secret(f"  {PLAIN_SECRET}\n")

    line = render(
        event=f"prefix{PLAIN_SECRET}suffix",
        detail={"nested": [("deep", PLAIN_SECRET)]},
        error=ValueError(f"bad value {PLAIN_SECRET}"),
    )

    assert PLAIN_SECRET not in line
    assert f"prefix{REDACTED}suffix" in line and f"ValueError('bad value {REDACTED}')" in line
    assert line.count(REDACTED) == 3


def test_the_api_key_variable_is_registered_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CEB_TEST_API_KEY", PLAIN_SECRET)
    monkeypatch.delenv("CEB_TEST_UNSET_KEY", raising=False)

    register_secret_env("CEB_TEST_API_KEY")
    register_secret_env("CEB_TEST_UNSET_KEY")

    assert render(event=f"using {PLAIN_SECRET}") == f"event='using {REDACTED}'\n"


def test_short_or_empty_values_are_not_registered() -> None:
    for value in ("", "   ", "abc", None):
        register_secret(value)

    assert render(event="abc is not a secret") == "event='abc is not a secret'\n"


def fail_with(message: str) -> None:
    local_value = "local" + "-value-" * 3  # must not be printed: tracebacks show no locals
    assert local_value
    raise BackendError(message, backend="openai@https://api.example.com/v1")


def test_console_output_redacts_fields_messages_and_exceptions(capsys: pytest.CaptureFixture[str]) -> None:
    register_secret(PLAIN_SECRET)
    configure_logging("info")
    log = structlog.get_logger("ceb.test")

    log.info("calling", api_key=PLAIN_SECRET, model="m")
    log.warning(f"request with key {PLAIN_SECRET} failed, Authorization: Bearer {BEARER}")
    try:
        fail_with(f"401 Unauthorized: incorrect API key provided: {OPENAI_KEY}")
    except BackendError as exc:
        log.exception("critic call failed", error=exc)
    log.debug("not shown at info")

    err = capsys.readouterr().err
    for secret in (PLAIN_SECRET, OPENAI_KEY, BEARER):
        assert secret not in err
    assert "api_key=[REDACTED]" in err and "model=m" in err
    assert f"request with key {REDACTED} failed, Authorization: Bearer {REDACTED}" in err
    assert "Traceback (most recent call last)" in err and "fail_with" in err
    assert f"incorrect API key provided: {REDACTED}" in err
    assert "-value--value-" not in err
    assert "not shown at info" not in err


def test_json_output_is_one_redacted_object_per_line(capsys: pytest.CaptureFixture[str]) -> None:
    register_secret(PLAIN_SECRET)
    configure_logging("warning", json=True)
    log = structlog.get_logger("ceb.test")

    log.warning("stream failed", stream="s", trajectory="t1", step=3, token=PLAIN_SECRET)
    try:
        fail_with(f"key {PLAIN_SECRET} refused")
    except BackendError:
        log.error("giving up", exc_info=True)

    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [x["event"] for x in lines] == ["stream failed", "giving up"]
    assert lines[0]["token"] == REDACTED and (lines[0]["stream"], lines[0]["step"]) == ("s", 3)
    assert lines[0]["level"] == "warning" and lines[0]["timestamp"].endswith("Z")
    assert f"key {REDACTED} refused" in lines[1]["exception"] and PLAIN_SECRET not in lines[1]["exception"]


def test_standard_library_warnings_go_through_the_same_redaction(capsys: pytest.CaptureFixture[str]) -> None:
    register_secret(PLAIN_SECRET)
    configure_logging("warning")
    configure_logging("warning")  # a second setup replaces the first: one line per record, not two

    logging.getLogger("openai._base_client").warning("retrying request with key %s", PLAIN_SECRET)
    logging.getLogger("httpx").info("HTTP Request: POST https://api.example.com/v1/chat/completions")

    err = capsys.readouterr().err
    assert err.count("retrying request with key") == 1
    assert f"retrying request with key {REDACTED}" in err and PLAIN_SECRET not in err
    assert "HTTP Request" not in err  # other libraries keep their own levels: no new noise


def test_unknown_level_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown log level 'loud'"):
        configure_logging("loud")


def test_odd_values_never_break_a_log_call() -> None:
    class Broken:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    deep: Any = PLAIN_SECRET
    for _ in range(50):
        deep = [deep]
    register_secret(PLAIN_SECRET)

    line = render(event="odd", broken=Broken(), deep=deep, data=b"bytes", n=None, flag=True, x=1.5)

    assert "broken='<Broken object>'" in line and PLAIN_SECRET not in line and REDACTED in line
    assert "n=None" in line and "flag=True" in line and "x=1.5" in line


def test_logging_survives_a_stderr_that_was_swapped_and_closed(capsys: pytest.CaptureFixture[str]) -> None:
    # What typer's CliRunner does around `ceb ...` in a test: configure under a buffer, then close it.
    real, buffer = sys.stderr, io.StringIO()
    sys.stderr = buffer
    try:
        configure_logging("warning")
    finally:
        sys.stderr = real
        buffer.close()

    structlog.get_logger("ceb.test").warning("after the runner", step=1)
    logging.getLogger("httpx").warning("library warning")

    err = capsys.readouterr().err
    assert "after the runner" in err and "step=1" in err and "library warning" in err


@pytest.mark.anyio
async def test_muted_events_are_dropped_inside_the_block_and_its_tasks_only(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info")
    log = structlog.get_logger("ceb.test")

    async def in_a_task() -> None:
        log.warning("step failed", step=2)
        log.warning("something else")

    with muted("step failed"):
        log.warning("step failed", step=1)
        async with anyio.create_task_group() as tg:
            tg.start_soon(in_a_task)
    log.warning("step failed", step=3)

    err = capsys.readouterr().err
    assert "step=1" not in err and "step=2" not in err
    assert "something else" in err and "step=3" in err


def test_as_a_library_ceb_is_silent_on_stdout_and_logs_through_the_logging_module(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """structlog's default configuration prints every event to stdout: an unconfigured caller got ceb's info lines
    mixed into its own output. Until structlog is configured, events go to the module's logging logger."""
    structlog.reset_defaults()
    log = logs.get_logger("ceb.gate.api").bind(stream="s")
    log.info("trajectory sent again", api_key="k" * 12)
    assert capsys.readouterr().out == ""
    with caplog.at_level(logging.INFO, logger="ceb"):
        log.info("trajectory sent again", api_key="k" * 12)
        log.debug("not shown")
    [record] = caplog.records
    assert record.name == "ceb.gate.api" and record.levelno == logging.INFO
    assert "trajectory sent again" in record.getMessage() and "stream='s'" in record.getMessage()
    assert "k" * 12 not in record.getMessage() and REDACTED in record.getMessage()
    assert capsys.readouterr().out == ""


def test_once_configured_ceb_events_follow_the_configuration(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("info", json=True)
    logs.get_logger("ceb.gate.api").info("replaying", count=2)
    captured = capsys.readouterr()
    assert captured.out == "" and json.loads(captured.err)["count"] == 2
