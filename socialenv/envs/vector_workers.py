"""Worker processes of the native vector env (``PolicySimVectorEnv(..., workers=W)``).

Each of the W workers holds a contiguous block of the sub-envs in a one-process
:class:`~socialenv.envs.vector.PolicySimVectorEnv` and writes its observations straight into
one shared-memory batch (Gymnasium's :mod:`gymnasium.vector.utils.shared_memory`), so a step
sends each worker its actions and gets back rewards, flags and infos; the observations never
travel through a pipe. The workers step at the same time, one core each. A sub-env is the same
object with the same seed whichever worker holds it, so results do not depend on W.
"""

from __future__ import annotations

import multiprocessing
import traceback
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
from gymnasium import Space
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory


def _rows(batch: Any, lo: int, hi: int) -> Any:
    """The view of sub-envs ``lo:hi`` of a batched observation (dict / tuple / array)."""
    if isinstance(batch, dict):
        return {key: _rows(value, lo, hi) for key, value in batch.items()}
    if isinstance(batch, tuple):
        return tuple(_rows(value, lo, hi) for value in batch)
    return batch[lo:hi]


class WorkerPool:
    """W worker processes, each stepping a contiguous block of the N sub-envs.

    Args:
        env_id: the PolicySim env id.
        num_envs: N, all sub-envs together.
        workers: W, 2 <= W <= N.
        autoreset_mode: the value of the vector env's ``AutoresetMode``.
        env_kwargs: the env's arguments (pickled to every worker).
        observation_space: one sub-env's observation space (the shared memory's layout).
        vector_class: the one-process vector env a worker runs its block in
            (:class:`~socialenv.envs.vector.PolicySimVectorEnv`, passed in so that this
            module does not import it back).
        context: the ``multiprocessing`` start method (None: "spawn").
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        workers: int,
        autoreset_mode: str,
        env_kwargs: dict[str, Any],
        observation_space: Space[Any],
        vector_class: type,
        context: str | None,
    ) -> None:
        allowed = multiprocessing.get_all_start_methods()
        if context is not None and context not in allowed:
            raise ValueError(f"context={context!r} is not allowed: one of {allowed} or None")
        ctx: Any = multiprocessing.get_context(context or "spawn")
        self.num_envs = num_envs
        bounds = np.linspace(0, num_envs, workers + 1).round().astype(int)
        self.blocks = [(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]
        self._closed = False
        self._connections: list[Connection] = []
        self._processes: list[Any] = []
        self._shared = create_shared_memory(observation_space, n=num_envs, ctx=ctx)
        #: the batched observations, written by the workers
        self.observations = read_from_shared_memory(observation_space, self._shared, n=num_envs)
        try:
            for lo, hi in self.blocks:
                parent, child = ctx.Pipe()
                process = ctx.Process(
                    target=_worker,
                    name=f"PolicySimVectorEnv-worker-{len(self._processes)}",
                    args=(
                        child,
                        vector_class,
                        env_id,
                        autoreset_mode,
                        env_kwargs,
                        self._shared,
                        num_envs,
                        lo,
                        hi,
                    ),
                    daemon=True,
                )
                process.start()  # spawn pickles env_kwargs here: an unpicklable one raises
                child.close()
                self._connections.append(parent)
                self._processes.append(process)
            for w in range(workers):
                self._receive(w)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ messages
    def _send(self, w: int, command: str, payload: Any = None) -> None:
        try:
            self._connections[w].send((command, payload))
        except (BrokenPipeError, ConnectionResetError, OSError) as error:
            raise self._exited(w) from error

    def _receive(self, w: int) -> Any:
        try:
            ok, value = self._connections[w].recv()
        except (EOFError, ConnectionResetError, BrokenPipeError, OSError) as error:
            raise self._exited(w) from error
        if not ok:
            raised, trace = value
            raise raised from RuntimeError(f"in vector env worker {w}:\n{trace}")
        return value

    def _exited(self, w: int) -> RuntimeError:
        self._processes[w].join(timeout=1)
        lo, hi = self.blocks[w]
        return RuntimeError(
            f"vector env worker {w} (sub-envs {lo}–{hi - 1}) exited "
            f"(exit code {self._processes[w].exitcode}); close the vector env and build a new one"
        )

    def _all(self, commands: dict[int, tuple[str, Any]]) -> dict[int, Any]:
        """Send each worker its command, then collect every answer (they run in parallel).
        Every answer is read before the first error is raised, so the pipes stay in step."""
        sent: list[int] = []
        first_error: BaseException | None = None
        for w, (command, payload) in commands.items():
            try:
                self._send(w, command, payload)
                sent.append(w)
            except RuntimeError as error:
                first_error = first_error or error
        results: dict[int, Any] = {}
        for w in sent:
            try:
                results[w] = self._receive(w)
            except BaseException as error:  # noqa: BLE001 - re-raised below
                first_error = first_error or error
        if first_error is not None:
            raise first_error
        return results

    def _by_worker(self, indices: Sequence[int]) -> dict[int, list[int]]:
        """Global sub-env indices grouped by the worker that holds them, as local indices."""
        groups: dict[int, list[int]] = {}
        for i in indices:
            w = next(w for w, (lo, hi) in enumerate(self.blocks) if lo <= i < hi)
            groups.setdefault(w, []).append(i - self.blocks[w][0])
        return groups

    # ------------------------------------------------------------------ the vector env's calls
    def reset(
        self, seeds: Sequence[int | None], mask: np.ndarray, options: dict[str, Any] | None
    ) -> list[tuple[int, dict[str, Any]]]:
        commands = {
            w: ("reset", (list(seeds[lo:hi]), mask[lo:hi].copy(), options))
            for w, (lo, hi) in enumerate(self.blocks)
            if mask[lo:hi].any()
        }
        results = self._all(commands)
        return [(self.blocks[w][0] + i, info) for w in sorted(results) for i, info in results[w]]

    def step(
        self, actions: list[Any]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        results = self._all({w: ("step", actions[lo:hi]) for w, (lo, hi) in enumerate(self.blocks)})
        parts = [results[w] for w in range(len(self.blocks))]
        return (
            np.concatenate([p[0] for p in parts]),
            np.concatenate([p[1] for p in parts]),
            np.concatenate([p[2] for p in parts]),
            [info for p in parts for info in p[3]],
        )

    def call(
        self, indices: Sequence[int], name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> list[Any]:
        groups = self._by_worker(indices)
        results = self._all(
            {w: ("call", (local, name, args, kwargs)) for w, local in groups.items()}
        )
        return self._in_order(indices, groups, results)

    def get_attr(self, indices: Sequence[int], name: str) -> list[Any]:
        groups = self._by_worker(indices)
        results = self._all({w: ("get_attr", (local, name)) for w, local in groups.items()})
        return self._in_order(indices, groups, results)

    def set_attr(self, indices: Sequence[int], name: str, values: list[Any]) -> None:
        groups = self._by_worker(indices)
        by_index = dict(zip(indices, values, strict=True))
        self._all(
            {
                w: ("set_attr", (local, name, [by_index[self.blocks[w][0] + i] for i in local]))
                for w, local in groups.items()
            }
        )

    def _in_order(
        self, indices: Sequence[int], groups: dict[int, list[int]], results: dict[int, list[Any]]
    ) -> list[Any]:
        by_index = {
            self.blocks[w][0] + i: value
            for w, local in groups.items()
            for i, value in zip(local, results[w], strict=True)
        }
        return [by_index[i] for i in indices]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for w, process in enumerate(self._processes):
            if process.is_alive():
                try:
                    self._send(w, "close")
                    self._connections[w].recv()
                except (RuntimeError, EOFError, OSError):  # it exited meanwhile: joined below
                    pass
        for process in self._processes:
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()
                process.join()
        for connection in self._connections:
            connection.close()


def _worker(
    connection: Connection,
    vector_class: type,
    env_id: str,
    autoreset_mode: str,
    env_kwargs: dict[str, Any],
    shared: Any,
    total_envs: int,
    lo: int,
    hi: int,
) -> None:
    """A worker's loop: build sub-envs ``lo:hi``, then answer commands until "close"."""
    try:
        envs = vector_class(
            env_id, hi - lo, autoreset_mode=autoreset_mode, copy=False, **env_kwargs
        )
        full = read_from_shared_memory(envs.single_observation_space, shared, n=total_envs)
        envs._observations = _rows(full, lo, hi)
        connection.send((True, None))
    except Exception as error:  # noqa: BLE001 - sent to the parent, which raises it
        connection.send((False, (error, traceback.format_exc())))
        return
    while True:
        try:
            command, payload = connection.recv()
        except (EOFError, KeyboardInterrupt):
            break
        try:
            if command == "close":
                envs.close()
                connection.send((True, None))
                break
            if command == "reset":
                seeds, mask, options = payload
                result: Any = envs._reset_envs(seeds, mask, options)
            elif command == "step":
                infos = envs._step_envs(payload)
                result = (envs._rewards, envs._terminations, envs._truncations, infos)
            elif command == "call":
                local, name, args, kwargs = payload
                result = envs.call_at(local, name, *args, **kwargs)
            elif command == "get_attr":
                local, name = payload
                result = list(envs.get_attr(name, local))
            elif command == "set_attr":
                local, name, values = payload
                envs.set_attr(name, values, local)
                result = None
            else:
                raise ValueError(f"unknown command {command!r}")
            connection.send((True, result))
        except Exception as error:  # noqa: BLE001 - sent to the parent, which raises it
            try:
                connection.send((False, (error, traceback.format_exc())))
            except Exception:  # noqa: BLE001 - an unpicklable error: send its text
                connection.send((False, (RuntimeError(repr(error)), traceback.format_exc())))
