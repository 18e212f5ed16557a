"""Secrets never reach what a job writes or logs: URL passwords and secret-named values are redacted in
``config.yaml``, ``summary.json``, ``.hydra/``, ``harness.log`` and console messages (harness/redaction.py)."""

from __future__ import annotations

import io
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.redaction import (
    MASK,
    RedactingFilter,
    install_log_redaction,
    is_secret_name,
    redact,
    redact_text,
    redact_yaml,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["API_KEY", "HF_TOKEN", "db_password", "PASSWD", "client_secret", "--api-key",
                                  "apiKey", "engine.env.WANDB_API_KEY", "AWS_ACCESS_KEY_ID", "Authorization",
                                  "AZURE_CREDENTIALS", "auth", "proxy_auth"])
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["max_tokens", "block_tokens", "prefill_s_per_token", "token_phase_timing",
                                  "special_token_ids", "api_key_env", "password_file", "url", "kv_block_size", "keys", "monkey"])
def test_ordinary_names(name: str) -> None:
    assert not is_secret_name(name)


@pytest.mark.parametrize(("text", "expected"), [
    ("engine.url=http://user:PASSWORD@host:8000/v1", "engine.url=http://user:***@host:8000/v1"),
    (r"engine.url=http\://user\:PASSWORD@host\:9", r"engine.url=http\://user\:***@host\:9"),  # Hydra's escaping
    ("postgres://me:p@ss@db/x and more", "postgres://me:***@db/x and more"),
    ("HF_TOKEN=hf_abc other=1", "HF_TOKEN=*** other=1"),
    ('{"api_key": "abc def", "n": 3}', '{"api_key": "***", "n": 3}'),
    ("env: {'OPENAI_API_KEY': 'sk-1'}", "env: {'OPENAI_API_KEY': '***'}"),
    ("vllm serve m --api-key sk-1 --port 80", "vllm serve m --api-key *** --port 80"),
    ("+engine.extra_args=[--api-key,sk-1]", "+engine.extra_args=[--api-key,***]"),
    ("Authorization: Bearer abc.def", "Authorization: ***"),
])
def test_redact_text(text: str, expected: str) -> None:
    assert redact_text(text) == expected
    assert redact_text(expected) == expected  # idempotent


def test_redact_text_keeps_ordinary_text() -> None:
    text = ("prefill_s_per_token: 0.002 max_tokens=64 token_phase_timing=true api_key: null "
            "url=http://127.0.0.1:8000/v1 http://user@host/ at 12:30:45")
    assert redact_text(text) == text


def test_redact_structures() -> None:
    config = {"engine": {"url": "http://u:PASSWORD@h:1", "api_key_env": "MY_KEY", "env": {"HF_TOKEN": "hf_x", "N": "2"},
                         "extra_args": ["--api-key", "sk-1", "--port", "80"], "prefill_s_per_token": 0.5,
                         "token": None},
              "_run": {"overrides": ["engine.url=http://u:PASSWORD@h:1", "+engine.env.HF_TOKEN=hf_x"]}}
    clean = redact(config)
    assert clean == {"engine": {"url": "http://u:***@h:1", "api_key_env": "MY_KEY", "env": {"HF_TOKEN": MASK, "N": "2"},
                                "extra_args": ["--api-key", MASK, "--port", "80"], "prefill_s_per_token": 0.5,
                                "token": None},
                     "_run": {"overrides": ["engine.url=http://u:***@h:1", "+engine.env.HF_TOKEN=***"]}}
    assert config["engine"]["env"]["HF_TOKEN"] == "hf_x"  # a copy: the run keeps the real value


def test_logging_filter_redacts_messages_arguments_and_tracebacks() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("test_redaction.filter")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("connecting to %s with HF_TOKEN=%s", "http://u:PASSWORD@h", "hf_SECRET")
        try:
            raise RuntimeError("refused by http://u:PASSWORD@h")
        except RuntimeError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    out = stream.getvalue()
    assert "PASSWORD" not in out and "hf_SECRET" not in out
    assert "connecting to http://u:***@h with HF_TOKEN=***" in out
    assert "RuntimeError: refused by http://u:***@h" in out


def test_installed_redaction_covers_every_logger_and_handler() -> None:
    """What ``python -m harness`` installs: records are redacted when created, so a handler configured later
    (as Hydra does for each job and for its own messages) needs no filter of its own."""
    previous = logging.getLogRecordFactory()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("test_redaction.factory")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        install_log_redaction()
        install_log_redaction()  # idempotent: one wrapper
        logger.warning("#0 : engine.url=%s", r"http\://u\:PASSWORD@h\:9")
    finally:
        logging.setLogRecordFactory(previous)
        logger.removeHandler(handler)
    assert stream.getvalue() == "#0 : engine.url=http\\://u\\:***@h\\:9\n"


def test_redact_yaml() -> None:
    assert yaml.safe_load(redact_yaml("- engine.url=http://u:PASSWORD@h\n- seed=1\n")) == ["engine.url=http://u:***@h",
                                                                                          "seed=1"]
    assert redact_yaml("# comment kept\na: 1\n") is None  # nothing to hide: the file is left as Hydra wrote it


def test_write_config_redacts_the_file_but_returns_the_real_values(tmp_path: Path) -> None:
    from harness.app import JobContext, write_config
    from harness.config import compose_config
    from harness.results import RunFolder

    overrides = ["engine=endpoint", "engine.url=http://u:PASSWORD@127.0.0.1:9"]
    ctx = JobContext(folder=RunFolder(tmp_path), experiment="e", job="j", choices={}, overrides=overrides)
    resolved = write_config(compose_config(overrides), ctx)
    assert resolved["engine"]["url"] == "http://u:PASSWORD@127.0.0.1:9"
    text = (tmp_path / "config.yaml").read_text(encoding="utf-8")
    assert "PASSWORD" not in text and text.count("http://u:***@127.0.0.1:9") == 2  # engine.url and _run.overrides


@pytest.mark.integration
def test_job_writes_and_logs_no_password(tmp_path: Path) -> None:
    """The endpoint job of the issue: before the fix six files of the folder held the password."""
    folder = tmp_path / "job"
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    cmd = [sys.executable, "-m", "harness", "engine=endpoint", "engine.url=http://user:PASSWORD@127.0.0.1:9",
           "workload.num_groups=1", "workload.prompts_per_group=2", f"hydra.run.dir={folder}"]
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=stdout, stderr=stderr, start_new_session=True)
        try:
            code = proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert code == 2, err.read_text()
    written = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert {"summary.json", "config.yaml", "harness.log", ".hydra/config.yaml", ".hydra/hydra.yaml",
            ".hydra/overrides.yaml"} <= set(written)
    leaking = [name for name in written if b"PASSWORD" in (folder / name).read_bytes()]
    assert leaking == []
    assert "PASSWORD" not in out.read_text() + err.read_text()
    assert "http://user:***@127.0.0.1:9" in (folder / "summary.json").read_text()
    assert "http://user:***@127.0.0.1:9" in err.read_text()  # the one-line error still names the URL


@pytest.mark.integration
def test_multirun_prints_and_writes_no_password(tmp_path: Path) -> None:
    """A multirun: Hydra prints each job's overrides (escaped) and saves multirun.yaml beside the jobs."""
    results = tmp_path / "results"
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    cmd = [sys.executable, "-m", "harness", "-m", "job=workload", "engine=endpoint",
           "engine.url=http://user:PASSWORD@127.0.0.1:9", "seed=0,1", f"results_dir={results}"]
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=stdout, stderr=stderr, start_new_session=True)
        try:
            code = proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    printed = out.read_text() + err.read_text()
    assert code == 0, printed
    written = [p for p in results.rglob("*") if p.is_file()]
    assert len([p for p in written if p.name == "summary.json"]) == 2 and any(p.name == "multirun.yaml" for p in written)
    assert [p for p in written if b"PASSWORD" in p.read_bytes()] == []
    assert "PASSWORD" not in printed and r"http\://user\:***@127.0.0.1" in printed
