"""Secrets kept out of what a job writes, logs and publishes (the run itself still uses the real values).

Two things are redacted, everywhere the harness writes text (``config.yaml``, ``summary.json``, the
``.hydra/`` copies of the config, ``harness.log`` and console messages, W&B config and summary):

- the password of a URL, ``http://user:PASSWORD@host`` -> ``http://user:***@host``;
- the value of a key, environment variable or command-line flag whose name marks a secret
  (:func:`is_secret_name`: ``API_KEY``, ``HF_TOKEN``, ``db_password``, ``--api-key`` ...), e.g.
  ``HF_TOKEN=abc`` -> ``HF_TOKEN=***``. Numbers, booleans and nulls are kept: a secret is text, and
  ``prefill_s_per_token: 0.002`` is not one.

:func:`redact` walks dicts and lists (keys decide for their values; in a list of arguments a secret flag
hides the argument after it), :func:`redact_text` handles free text (log lines, reasons, overrides), and
:func:`install_log_redaction` (called by ``python -m harness`` before Hydra starts) applies it to every
log record the process creates, so Hydra's console, ``harness.log`` and Hydra's own messages (a
multirun prints each job's overrides) are redacted whatever logging preset is chosen;
:class:`RedactingFilter` does the same for the handlers it is attached to.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

MASK = "***"

# A name is secret when one of its words is one of these ...
_SECRET_WORDS = frozenset({"password", "passwd", "passphrase", "secret", "secrets", "credential", "credentials",
                           "apikey", "authorization", "cookie", "bearer"})
# ... or its last word is one of these (``HF_TOKEN``, ``api_key``, but not ``token_phase_timing``).
_SECRET_LAST_WORDS = frozenset({"key", "token", "auth", "pwd", "pass"})
# ``AWS_ACCESS_KEY_ID``, ``private_key_path``: the word pair marks the secret wherever it is.
_SECRET_PAIRS = (("access", "key"), ("private", "key"), ("secret", "key"), ("api", "key"), ("auth", "token"))

# ``api_key_env``, ``password_file``: where a secret is found, not the secret.
_REFERENCE_WORDS = frozenset({"env", "var", "file", "path", "dir", "name"})

_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_NOT_SECRET_VALUE = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?|true|false|null|none|~|\*\*\*", re.IGNORECASE)

# ``scheme://user:password@``, also as Hydra escapes it in multirun overrides (``http\://user\:password@``)
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*\\?://[^\s/:@'\"\\]*)(?P<sep>\\?:)(?P<pw>[^\s/'\"]+)@")
_ASSIGNMENT = re.compile(
    r"(?P<name>[A-Za-z_][\w.\-]*)(?P<nq>[\"']?)(?P<sep>[ \t]*[=:][ \t]*)"
    r"(?:(?P<q>[\"'])(?P<qval>[^\"'\n]*)(?P=q)"
    r"|(?P<val>(?:(?:Bearer|Basic|Token)[ \t]+)?[^\s,;\"'}\])]+))")
# ``--api-key VALUE`` on a command line, ``[--api-key,VALUE]`` in a Hydra list override
_FLAG_THEN_VALUE = re.compile(r"(?P<flag>(?<![\w-])--?[A-Za-z][\w-]*)(?P<sep>[ \t]+|,[ \t]*)(?P<val>[^\s\-,\]][^\s,\]]*)")


def name_words(name: str) -> list[str]:
    """Lower-case words of the last dotted part of a key, variable or flag name (``engine.env.HF_TOKEN``
    -> ``["hf", "token"]``, ``apiKey`` -> ``["api", "key"]``)."""
    last = str(name).strip().lstrip("-").rsplit(".", 1)[-1]
    return [w.lower() for w in _WORD.findall(last)]


def is_secret_name(name: str) -> bool:
    """Whether a key, environment variable or flag of this name holds a secret."""
    words = name_words(name)
    if not words:
        return False
    if words[-1] in _REFERENCE_WORDS:
        return False
    if _SECRET_WORDS.intersection(words):
        return True
    if words[-1] in _SECRET_LAST_WORDS:
        return words[-2:-1] != ["per"]  # ``prefill_s_per_token`` is a rate
    return any(pair == tuple(words[i:i + 2]) for pair in _SECRET_PAIRS for i in range(len(words) - 1))


def _hides(value: str) -> bool:
    return bool(value) and not _NOT_SECRET_VALUE.fullmatch(value)


def _assignment(match: re.Match[str]) -> str:
    if not is_secret_name(match["name"]):
        return match[0]
    if match["q"] is not None:
        value = match["qval"]
        if not _hides(value):
            return match[0]
        return f"{match['name']}{match['nq']}{match['sep']}{match['q']}{MASK}{match['q']}"
    if not _hides(match["val"]):
        return match[0]
    return f"{match['name']}{match['nq']}{match['sep']}{MASK}"


def _flag(match: re.Match[str]) -> str:
    if not is_secret_name(match["flag"]) or not _hides(match["val"]):
        return match[0]
    return f"{match['flag']}{match['sep']}{MASK}"


def redact_text(text: str) -> str:
    """``text`` with URL passwords and the values of secret-named assignments and flags replaced by ``***``."""
    if not text:
        return text
    text = _URL_PASSWORD.sub(lambda m: f"{m['head']}{m['sep']}{MASK}@", text)
    text = _ASSIGNMENT.sub(_assignment, text)
    return _FLAG_THEN_VALUE.sub(_flag, text)


def _redact_value(value: Any) -> Any:
    """The value of a secret-named key: text is masked, numbers, booleans, nulls and empty text are kept."""
    if isinstance(value, str):
        return MASK if _hides(value) else value
    if isinstance(value, Mapping | list | tuple):
        return redact(value)
    return value


def redact(obj: Any) -> Any:
    """A copy of ``obj`` (dicts, lists, tuples, strings, scalars) with every secret replaced by ``***``."""
    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, Mapping):
        return {key: _redact_value(value) if is_secret_name(str(key)) else redact(value)
                for key, value in obj.items()}
    if isinstance(obj, list | tuple):
        out: list[Any] = []
        hide_next = False
        for item in obj:
            if hide_next and isinstance(item, str) and _hides(item):
                out.append(MASK)
            else:
                out.append(redact(item))
            hide_next = (isinstance(item, str) and item.startswith("-") and "=" not in item
                         and is_secret_name(item))
        return type(obj)(out) if isinstance(obj, tuple) else out
    return obj


def redact_yaml(text: str) -> str | None:
    """A YAML document with its secrets redacted, or None when it holds none (then keep it byte for byte)."""
    import yaml

    data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # safe_load, with libyaml's parser
    clean = redact(data)
    if clean == data:
        return None
    return yaml.safe_dump(clean, sort_keys=False, default_flow_style=False, allow_unicode=True)


def redact_record(record: logging.LogRecord) -> logging.LogRecord:
    """Redact a log record in place: its message (with its arguments merged in), traceback and stack text."""
    message = record.getMessage()
    clean = redact_text(message)
    if clean != message:
        record.msg, record.args = clean, None
    if record.exc_info and not record.exc_text:
        record.exc_text = logging.Formatter().formatException(record.exc_info)
    if record.exc_text:
        record.exc_text = redact_text(record.exc_text)
    if record.stack_info:
        record.stack_info = redact_text(record.stack_info)
    return record


class RedactingFilter(logging.Filter):
    """Log filter that redacts each record's message, arguments and traceback text (for handlers set up
    outside ``python -m harness``, which redacts every record it creates: :func:`install_log_redaction`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        redact_record(record)
        return True


def install_log_redaction() -> None:
    """Redact every log record this process creates, whichever logger and handler it goes to (Hydra's
    console and ``harness.log``, Hydra's own messages, any ``hydra/job_logging`` preset): wraps the log
    record factory (``logging.setLogRecordFactory``). Idempotent; called by ``python -m harness``."""
    factory = logging.getLogRecordFactory()
    if getattr(factory, "redacting", False):
        return

    def make_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        return redact_record(factory(*args, **kwargs))

    make_record.redacting = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(make_record)
