"""Data-only checkpoints: a zip of ``.npy`` arrays plus one JSON tree, never a pickle.

Layout of a checkpoint file (a standard ``.npz`` zip archive)::

    meta.json      {"format": "policysim-checkpoint", "version": 2, "kind": ..., "tree": ...}
    a0.npy, a1.npy ...   every array of the tree (numeric, bool or fixed-width text dtypes)

:func:`read_checkpoint` opens the zip, reads and checks ``meta.json`` (format, version,
kind) before anything else, then decodes the tree: JSON values, arrays read with
``allow_pickle=False`` and a closed set of tagged values. Classes are never named by the
file: a tagged dataclass or config is looked up in :data:`data_classes` (the package's own
config and scenario types), so a file cannot make the loader import or call anything else.
Fields named like a secret (:func:`policysim_infra.redaction.is_secret_name`) are written as None
(a key is read again from its environment variable when the checkpoint is loaded).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import zipfile
import zlib
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from policysim_infra.npz import NpzReader
from policysim_infra.redaction import is_secret_name

FORMAT = "policysim-checkpoint"
VERSION = 2
META = "meta.json"
#: Largest ``meta.json`` read (bytes): a bigger one is refused before parsing.
MAX_META_BYTES = 256 * 1024 * 1024
#: Largest total of array bytes in a checkpoint. Arrays are stored uncompressed, so their
#: total may also not exceed the file's size on disk (checked from the ``.npy`` headers
#: before any array is read, :class:`policysim_infra.npz.NpzReader`).
MAX_CHECKPOINT_ARRAY_BYTES = 1 << 40
_ARRAY_MEMBER = re.compile(r"a[0-9]{1,9}")
_TAGS = (
    "__array__",
    "__scalar__",
    "__tensor__",
    "__tuple__",
    "__items__",
    "__data__",
    "__object__",
)


class CheckpointError(ValueError):
    """A file that is not a loadable PolicySim checkpoint (names the file and the reason)."""


def data_classes() -> dict[str, type]:
    """The only classes a checkpoint may instantiate: name -> class (configs and scenarios)."""
    from agent_models.llm.config import LLMConfig, MemoryConfig
    from agent_models.surrogate import SurrogateConfig
    from agent_models.types import Categorical, NewsEvent, Profiles
    from socialenv.core.config import (
        ClassifierConfig,
        ContextConfig,
        EnvConfig,
        RecommenderConfig,
        RewardConfig,
    )
    from socialenv.envs.registration import lever_config_classes
    from socialenv.mechanisms.activity import HawkesConfig
    from socialenv.mechanisms.governance import ModerationConfig
    from socialenv.scenarios.scenario import Scenario

    classes: tuple[type, ...] = (
        EnvConfig,
        RecommenderConfig,
        RewardConfig,
        ContextConfig,
        ClassifierConfig,
        SurrogateConfig,
        LLMConfig,
        MemoryConfig,
        HawkesConfig,
        ModerationConfig,
        Scenario,
        Profiles,
        Categorical,
        NewsEvent,
        *lever_config_classes(),
    )
    return {cls.__name__: cls for cls in classes}


class _Encoder:
    def __init__(self, objects: str) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        self.objects = objects
        self.classes = {cls: name for name, cls in data_classes().items()}

    def _array(self, value: np.ndarray, where: str) -> str:
        if value.dtype.hasobject:
            raise CheckpointError(f"{where}: an object array cannot be checkpointed (data only)")
        key = f"a{len(self.arrays)}"
        self.arrays[key] = value if value.flags.c_contiguous else value.copy(order="C")
        return key

    def encode(self, value: Any, where: str = "state") -> Any:
        if value is None or isinstance(value, bool | str):
            return value
        if isinstance(value, Enum):
            value = value.value
        if isinstance(value, int | float) and not isinstance(value, np.generic):
            return value
        if isinstance(value, np.generic):
            return {"__scalar__": self._array(np.asarray(value), where)}
        if isinstance(value, np.ndarray):
            return {"__array__": self._array(value, where)}
        if type(value).__module__.startswith("torch") and hasattr(value, "detach"):
            array = value.detach().cpu()
            return {"__tensor__": self._array(array.numpy(), where), "dtype": str(value.dtype)}
        if isinstance(value, tuple):
            return {"__tuple__": [self.encode(v, f"{where}[{i}]") for i, v in enumerate(value)]}
        if isinstance(value, list):
            return [self.encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, dict):
            value = {k: None if is_secret_name(k) else v for k, v in value.items()}
            if all(isinstance(k, str) and k not in _TAGS for k in value):
                return {k: self.encode(v, f"{where}.{k}") for k, v in value.items()}
            return {
                "__items__": [
                    [self.encode(k, where), self.encode(v, f"{where}[{k!r}]")]
                    for k, v in value.items()
                ]
            }
        name = self.classes.get(type(value))
        if name is not None:
            if dataclasses.is_dataclass(value):
                names = [f.name for f in dataclasses.fields(value)]
            else:  # a pydantic model
                names = list(type(value).model_fields)
            fields = {}
            for f in names:
                v = getattr(value, f)
                fields[f] = None if is_secret_name(f) else self.encode(v, f"{where}.{f}")
            return {"__data__": name, "fields": fields}
        if self.objects == "placeholder":
            return {"__object__": type(value).__qualname__}
        raise CheckpointError(
            f"{where}: a {type(value).__qualname__} cannot be checkpointed (data only: arrays, "
            f"numbers, strings, lists, dicts and the config classes {sorted(data_classes())})"
        )


def write_checkpoint(path: str | Path, kind: str, tree: Any, *, objects: str = "refuse") -> Path:
    """Write ``tree`` to ``path`` atomically (a temporary file, then a rename).

    ``objects="placeholder"`` writes a value that is not data (a user's Brain or recommender
    instance) as ``{"__object__": class name}``, which :func:`read_checkpoint` returns as
    :class:`Placeholder` for the caller to replace; ``"refuse"`` raises instead."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    encoder = _Encoder(objects)
    meta = {"format": FORMAT, "version": VERSION, "kind": kind, "tree": encoder.encode(tree)}
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
            zf.writestr(META, json.dumps(meta))
            for key, array in encoder.arrays.items():
                with zf.open(f"{key}.npy", "w", force_zip64=True) as fh:
                    np.lib.format.write_array(fh, array, allow_pickle=False)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


@dataclasses.dataclass(frozen=True)
class Placeholder:
    """A value that was not data when saved (a Brain or recommender instance)."""

    type_name: str


class _Decoder:
    def __init__(self, reader: NpzReader, path: Path) -> None:
        self.reader = reader
        self.path = path
        self.classes = data_classes()
        self.used: set[str] = set()

    def _fail(self, why: str) -> CheckpointError:
        return CheckpointError(f"{self.path} is not a valid PolicySim checkpoint: {why}")

    def _array(self, key: Any) -> np.ndarray:
        if not isinstance(key, str) or key not in self.reader.headers:
            raise self._fail(f"array {key!r} is missing")
        if key in self.used:
            raise self._fail(f"array {key!r} is referenced twice")
        self.used.add(key)
        try:
            return self.reader.read(key)
        except ValueError as err:
            raise self._fail(f"array {key!r}: {err}") from None

    def decode(self, value: Any) -> Any:
        if value is None or isinstance(value, bool | int | float | str):
            return value
        if isinstance(value, list):
            return [self.decode(v) for v in value]
        if not isinstance(value, dict):
            raise self._fail(f"unexpected JSON value of type {type(value).__name__}")
        tags = [t for t in _TAGS if t in value]
        if not tags:
            return {k: self.decode(v) for k, v in value.items()}
        tag = tags[0]
        body = value[tag]
        if tag == "__array__":
            return self._array(body)
        if tag == "__scalar__":
            return self._array(body)[()]
        if tag == "__tensor__":
            import torch

            return torch.from_numpy(self._array(body).copy())
        if tag == "__tuple__":
            if not isinstance(body, list):
                raise self._fail("a tuple must be a JSON list")
            return tuple(self.decode(v) for v in body)
        if tag == "__items__":
            if not isinstance(body, list) or not all(
                isinstance(p, list) and len(p) == 2 for p in body
            ):
                raise self._fail("items must be [key, value] pairs")
            return {self._key(self.decode(k)): self.decode(v) for k, v in body}
        if tag == "__object__":
            return Placeholder(str(body))
        cls = self.classes.get(body) if isinstance(body, str) else None
        if cls is None:
            raise self._fail(
                f"class {body!r} is not one of the checkpointable {sorted(self.classes)}"
            )
        fields = value.get("fields")
        if not isinstance(fields, dict):
            raise self._fail(f"{body}: fields must be a JSON object")
        decoded = {k: self.decode(v) for k, v in fields.items()}
        upgrade = getattr(cls, "upgrade_checkpoint_fields", None)
        if upgrade is not None:  # a config saved by an earlier layout of its fields
            decoded = upgrade(decoded)
        try:
            if dataclasses.is_dataclass(cls):
                allowed = {f.name for f in dataclasses.fields(cls)}
                unknown = set(decoded) - allowed
                if unknown:
                    raise ValueError(f"unknown fields {sorted(unknown)}")
                return _construct(cls, decoded)
            return cls.model_validate(decoded)
        except (TypeError, ValueError) as err:
            raise self._fail(f"{body}: {err}") from err

    def _key(self, key: Any) -> Any:
        if isinstance(key, list):  # a tuple key decoded as a list
            return tuple(key)
        if isinstance(key, np.ndarray):
            return key.item()
        return key


def _construct(cls: type, fields: dict[str, Any]) -> Any:
    placeholders = [k for k, v in fields.items() if isinstance(v, Placeholder)]
    if placeholders:  # left for the caller (e.g. load_env(path, users=...)) to fill
        obj = object.__new__(cls)
        for k, v in fields.items():
            object.__setattr__(obj, k, v)
        return obj
    return cls(**fields)


def read_checkpoint(path: str | Path, kind: str) -> Any:
    """The tree written by :func:`write_checkpoint`; checks format, version and ``kind`` first.

    Raises FileNotFoundError for a missing file and :class:`CheckpointError` (a ValueError)
    naming the file for anything else: not a zip, an old pickle save, another format or
    version, a malformed tree, an array that would need unpickling, an unknown class."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    with path.open("rb") as fh:
        head = fh.read(4)
    if head[:1] == b"\x80":
        raise CheckpointError(
            f"{path} is a format-1 (pickle) save; pickles can run code when loaded, so this "
            f"version only reads format-{VERSION} checkpoints: re-create it with env.save()"
        )
    if not zipfile.is_zipfile(path):
        raise CheckpointError(f"{path} is not a PolicySim checkpoint (not a zip/npz archive)")
    try:
        with zipfile.ZipFile(path) as zf:
            try:
                info = zf.getinfo(META)
            except KeyError:
                raise CheckpointError(f"{path} is not a PolicySim checkpoint (no {META})") from None
            if info.file_size > MAX_META_BYTES:
                raise CheckpointError(
                    f"{path}: {META} is {info.file_size} bytes (limit {MAX_META_BYTES})"
                )
            meta_bytes = zf.read(META)
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as err:
        raise CheckpointError(
            f"{path} is a damaged checkpoint ({type(err).__name__}: {err})"
        ) from None
    try:
        meta = json.loads(meta_bytes)
    except (ValueError, RecursionError) as err:
        raise CheckpointError(f"{path}: {META} is not valid JSON ({err})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(
            f"{path} is not a PolicySim checkpoint (format {meta.get('format')!r})"
            if isinstance(meta, dict)
            else f"{path} is not a PolicySim checkpoint"
        )
    if meta.get("version") != VERSION:
        raise CheckpointError(
            f"{path} has checkpoint format version {meta.get('version')!r}; this PolicySim "
            f"reads version {VERSION}"
        )
    if meta.get("kind") != kind:
        raise CheckpointError(f"{path} holds a {meta.get('kind')!r} checkpoint, not {kind!r}")

    def array_names(headers: dict[str, Any]) -> None:
        odd = sorted(name for name in headers if not _ARRAY_MEMBER.fullmatch(name))
        if odd:
            raise ValueError(f"holds unknown member(s) {[f'{n}.npy' for n in odd[:5]]}")

    try:
        reader = NpzReader(
            path,
            max_bytes=MAX_CHECKPOINT_ARRAY_BYTES,
            extra=(META,),
            check=array_names,
            what="checkpoint",
            max_expansion=1.0,
            small_bytes=0,
        )
    except ValueError as err:
        raise CheckpointError(f"{err}") from None
    with reader:
        try:
            return _Decoder(reader, path).decode(meta.get("tree"))
        except RecursionError:
            raise CheckpointError(f"{path}: the checkpoint tree is nested too deeply") from None
        except (TypeError, KeyError, IndexError, AttributeError) as err:  # e.g. an unhashable key
            raise CheckpointError(
                f"{path} is not a valid PolicySim checkpoint: {type(err).__name__}: {err}"
            ) from None


def fill_placeholders(
    obj: Any, overrides: dict[str, Any], where: Callable[[str], str]
) -> dict[str, Any]:
    """Field values of dataclass ``obj`` with each :class:`Placeholder` replaced from
    ``overrides``; a placeholder without an override raises a ValueError saying what to pass."""
    values = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    for name, value in values.items():
        if name in overrides:
            values[name] = overrides[name]
        elif isinstance(value, Placeholder):
            raise ValueError(
                f"{name}: the checkpoint was saved with a {value.type_name} instance, which a "
                f"data-only checkpoint does not store; pass it again: {where(name)}"
            )
    unknown = set(overrides) - set(values)
    if unknown:
        raise ValueError(f"unknown override(s) {sorted(unknown)}; allowed: {sorted(values)}")
    return values


#: The LLM config's default secret source (not a choice the file made).
_DEFAULT_KEY_ENV = "OPENAI_API_KEY"


def code_references(config: Any) -> list[str]:
    """Fields of a decoded env config (or anything with an ``llm`` attribute) that a file may
    not choose, each as "what it chooses (field=value)": code to run (``llm.toxicity`` other
    than the default, ``llm.vllm_engine_kwargs``), an endpoint (``llm.base_url``), a secret's
    source (``llm.api_key_env`` other than the default), a path to write (``llm.replay`` when
    ``replay_mode`` records). :meth:`PolicySimEnv.load` refuses them unless the caller passes
    ``llm=`` again; :func:`policysim.runner.resume` unless ``llm=`` is passed to it."""
    llm = getattr(config, "llm", None)
    if llm is None or isinstance(llm, Placeholder | str):
        return []
    if isinstance(llm, dict):
        get = llm.get
    else:

        def get(name: str, default: Any = None) -> Any:
            return getattr(llm, name, default)

    found = []
    toxicity = get("toxicity", "profanity_check")
    if toxicity not in (None, "profanity_check"):
        found.append(f"names code to run (llm.toxicity={toxicity!r})")
    engine = get("vllm_engine_kwargs", None)
    if engine:
        keys = sorted(map(str, engine)) if isinstance(engine, dict) else engine
        found.append(f"names code to run (llm.vllm_engine_kwargs={keys!r}, e.g. trust_remote_code)")
    base_url = get("base_url", None)
    if base_url:
        found.append(f"chooses an endpoint (llm.base_url={base_url!r})")
    key_env = get("api_key_env", _DEFAULT_KEY_ENV)
    if key_env not in (None, _DEFAULT_KEY_ENV):
        found.append(f"chooses a secret's source (llm.api_key_env={key_env!r})")
    replay, mode = get("replay", None), get("replay_mode", "auto")
    if replay is not None and mode != "replay":
        found.append(f"chooses a path to write (llm.replay={replay!r} with replay_mode={mode!r})")
    return found


def refusal(path: Any, found: list[str], remedy: str) -> CheckpointError:
    """The error for a checkpoint whose config chose what only the caller may (``found``
    from :func:`code_references`)."""
    return CheckpointError(
        f"{path}: the saved config {'; '.join(found)}; a checkpoint may not choose code, an "
        f"endpoint, a secret's source or a path to write: {remedy}"
    )
