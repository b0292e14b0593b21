"""The OpenAI backend against a real ``transformers serve`` (``pip install
"transformers[serving]"``) serving the tiny test model: the server answers HTTP 200 to
``response_format`` and ``logprobs`` and ignores them ("Ignoring unsupported fields in the
request"). The probe must find that no form is enforced, label scoring must report that
there are no logprobs, and the stance labeller must fall back to decoding. Slow (the server
starts in 20-60 s on a loaded machine); skipped where ``transformers serve`` is absent."""

from __future__ import annotations

import importlib.util
import shutil
import socket
import subprocess
import time
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
if (
    shutil.which("transformers") is None
    or importlib.util.find_spec("fastapi") is None
    or importlib.util.find_spec("uvicorn") is None
):
    pytest.skip('needs `pip install "transformers[serving]"`', allow_module_level=True)

from agent_models.llm import LLMBackendError, LLMConfig, Sampling, make_backend  # noqa: E402
from agent_models.llm.backends.base import ScoringUnsupported  # noqa: E402
from agent_models.testing import build_tiny_lm  # noqa: E402

SCHEMA = {
    "type": "object",
    "properties": {"stance": {"type": "string"}},
    "required": ["stance"],
    "additionalProperties": False,
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    model = str(build_tiny_lm(tmp_path_factory.mktemp("tiny_lm")))
    port = _free_port()
    log = Path(tmp_path_factory.mktemp("serve")) / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            ["transformers", "serve", model, "--host", "127.0.0.1", "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 240
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"transformers serve did not start: {log.read_text()[-2000:]}")
                time.sleep(1)
        yield f"http://127.0.0.1:{port}/v1", model
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _config(url: str, model: str, **extra: object) -> LLMConfig:
    return LLMConfig.model_validate(
        {
            "backend": "openai",
            "model": model,
            "base_url": url,
            "request_timeout": 120,
            "max_retries": 1,
            **extra,
        }
    )


def test_probe_finds_response_format_ignored(served: tuple[str, str]) -> None:
    url, model = served
    with make_backend(_config(url, model)) as backend:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            backend.generate(
                [[{"role": "user", "content": "hi"}]], SCHEMA, Sampling(max_new_tokens=8)
            )
        assert backend.form == "none"
        assert backend.probe_results["json_schema"].startswith("ignored: HTTP 200")
        assert backend.probe_results["json_object"].startswith("ignored: HTTP 200")
        assert any("no structured-output form is enforced" in str(w.message) for w in caught)
        with pytest.raises(ScoringUnsupported, match="without logprobs"):
            backend.score_labels([[{"role": "user", "content": "hi"}]], ["against", "favor"])
    with make_backend(_config(url, model, strict=True)) as backend:
        with pytest.raises(LLMBackendError, match="ignored: HTTP 200"):
            backend.generate(
                [[{"role": "user", "content": "hi"}]], SCHEMA, Sampling(max_new_tokens=8)
            )
