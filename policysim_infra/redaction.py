"""Secrets never reach a file: redaction of values whose field is named like a secret.

Every JSON file, W&B config and checkpoint the package writes passes its data through
:func:`redact` (or, for checkpoints, writes secret-named strings as None). A field is
secret when its name (case-insensitive) contains one of :data:`SECRET_WORDS` as a word
part (``api_key``, ``OPENAI_API_KEY``, ``hf_token``, ``password``; not ``max_tokens``, nor
``api_key_env``, which names the environment variable a key is read from).
Credentials inside URLs (``https://user:pass@host``) are masked wherever they appear.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any

#: Word parts that make a field name secret.
SECRET_WORDS = (
    "apikey",
    "api_key",
    "secret",
    "password",
    "passwd",
    "token",
    "credential",
    "credentials",
    "authorization",
    "auth",
    "private_key",
    "access_key",
    "session_key",
)
REDACTED = "<redacted>"
#: Suffixes of fields that name where a secret is read from (``api_key_env``), not secrets.
_NAMES_A_VARIABLE = ("_env", "_var", "_variable")

_SECRET_NAME = re.compile(
    r"(?:^|[_\-.\s])(?:" + "|".join(re.escape(w) for w in SECRET_WORDS) + r")(?:$|[_\-.\s])",
    re.IGNORECASE,
)
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s:]+(?::[^/@\s]*)?@")


def is_secret_name(name: Any) -> bool:
    """Whether a field called ``name`` holds a secret (``api_key``, ``X-Api-Key``, ``hf_token``)."""
    if not isinstance(name, str) or name.lower().endswith(_NAMES_A_VARIABLE):
        return False
    return _SECRET_NAME.search(name.replace("-", "_")) is not None


def _environment_secrets() -> list[str]:
    """Values of secret-named environment variables (``OPENAI_API_KEY``...), 8+ characters."""
    return [v for k, v in os.environ.items() if len(v) >= 8 and is_secret_name(k)]


def redact_text(text: str) -> str:
    """``text`` with credentials in URLs masked (``https://<redacted>@host``) and the value
    of any secret-named environment variable (e.g. ``$OPENAI_API_KEY``) replaced."""
    text = _URL_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", text)
    for secret in _environment_secrets():
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def to_json(value: Any, **dumps_kwargs: Any) -> str:
    """``json.dumps`` of ``value`` after :func:`redact` (objects as their repr), itself redacted:
    what every JSON file of a run or sweep is written with."""
    return redact_text(json.dumps(redact(value), default=repr, **dumps_kwargs))


def to_json_data(value: Any) -> Any:
    """``value`` after :func:`redact`, as plain JSON data (for W&B configs and logs)."""
    return json.loads(to_json(value))


def redact(value: Any, *, _depth: int = 0) -> Any:
    """A copy of ``value`` (dicts, lists, tuples, dataclasses, pydantic models) as plain data
    with every secret-named field's value replaced by ``"<redacted>"`` (None stays None)
    and URL credentials masked in strings. Other objects are returned as is."""
    if _depth > 100:
        return REDACTED
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {
            k: (REDACTED if value[k] is not None else None)
            if is_secret_name(k)
            else redact(v, _depth=_depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return type(value)(redact(v, _depth=_depth + 1) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return redact(
            {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}, _depth=_depth + 1
        )
    if hasattr(type(value), "model_fields") and hasattr(value, "model_dump"):
        return redact({f: getattr(value, f) for f in type(value).model_fields}, _depth=_depth + 1)
    return value
