"""Rollouts on Ray: a stable-baselines3 ``VecEnv`` whose environments live in Ray actors.

``PPOConfig(vec="ray")`` (``controlplane policy train --vec ray``) trains with it. Each
environment runs in an actor of its own (one CPU each), on this machine (a local Ray started
for the run and stopped after) or on a Ray cluster (``ray_address``, e.g. ``"auto"`` or
``"ray://head:10001"``, which must have this package installed on its workers). The step
semantics are sb3's ``SubprocVecEnv``'s: a finished episode resets at once, its last
observation is in ``info["terminal_observation"]``, ``info["TimeLimit.truncated"]`` says a
truncation.

MaskablePPO asks the environments for their action masks before every step
(``env_method("action_masks")``); every answer of an actor carries its environment's current
mask, so that call is answered here without another round trip to the actors.

Ray is imported inside the functions (the optional ``[ray]`` extra): the hub and the agents
never import it; without it :func:`require_ray` says what to install.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

__all__ = ["RAY_HINT", "MissingRay", "RayVecEnv", "require_ray"]

RAY_HINT = "pip install -e '.[ray]'"


class MissingRay(RuntimeError):
    """Ray is not installed."""


def require_ray() -> None:
    """Raise :class:`MissingRay` naming the install command when Ray cannot be imported."""
    try:
        import ray  # noqa: F401
    except ImportError as exc:
        raise MissingRay(f"vec 'ray' needs Ray: {RAY_HINT} ({exc})") from None


class _EnvActor:
    """One environment inside a Ray actor; every answer carries its action mask."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self.env = make()

    def _mask(self) -> Any:
        masks = getattr(self.env, "action_masks", None)
        if masks is None:
            try:
                masks = self.env.get_wrapper_attr("action_masks")
            except AttributeError:
                return None
        return masks()

    def spaces(self) -> tuple[Any, Any]:
        return self.env.observation_space, self.env.action_space

    def reset(self, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, dict[str, Any], Any]:
        kwargs: dict[str, Any] = {"seed": seed}
        if options:
            kwargs["options"] = options
        obs, info = self.env.reset(**kwargs)
        return obs, info, self._mask()

    def step(self, action: Any) -> tuple[Any, float, bool, dict[str, Any], dict[str, Any], Any]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        done = bool(terminated or truncated)
        info["TimeLimit.truncated"] = bool(truncated and not terminated)
        reset_info: dict[str, Any] = {}
        if done:
            info["terminal_observation"] = obs
            obs, reset_info = self.env.reset()
        return obs, float(reward), done, info, reset_info, self._mask()

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return self.env.get_wrapper_attr(name)(*args, **kwargs)

    def get_attr(self, name: str) -> Any:
        return self.env.get_wrapper_attr(name)

    def has_attr(self, name: str) -> bool:
        try:
            self.env.get_wrapper_attr(name)
        except AttributeError:
            return False
        return True

    def set_attr(self, name: str, value: Any) -> None:
        setattr(self.env, name, value)

    def is_wrapped(self, wrapper_class: type) -> bool:
        from stable_baselines3.common.env_util import is_wrapped

        return bool(is_wrapped(self.env, wrapper_class))

    def close(self) -> None:
        self.env.close()


def _vec_env_base() -> type:
    from stable_baselines3.common.vec_env import VecEnv

    return VecEnv


def RayVecEnv(
    env_fns: Sequence[Callable[[], Any]],
    *,
    address: str | None = None,
    cpus_per_env: float = 1.0,
) -> Any:
    """A ``VecEnv`` over ``env_fns``, each built inside its own Ray actor (see the module docstring).
    A function, not the class: the class derives from sb3's ``VecEnv`` and is made on first use,
    so that importing this module imports neither sb3 nor Ray."""
    require_ray()
    return _ray_vec_env_class()(env_fns, address=address, cpus_per_env=cpus_per_env)


_CLASS: type | None = None


def _ray_vec_env_class() -> type:
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    import ray

    base = _vec_env_base()

    class _RayVecEnv(base):  # type: ignore[misc,valid-type]
        def __init__(
            self, env_fns: Sequence[Callable[[], Any]], *, address: str | None, cpus_per_env: float
        ) -> None:
            if not env_fns:
                raise ValueError("RayVecEnv needs at least one environment")
            self._owns_ray = not ray.is_initialized()
            if self._owns_ray:
                ray.init(
                    address=address,
                    include_dashboard=False,
                    log_to_driver=False,
                    configure_logging=False,
                )
            actor = ray.remote(num_cpus=cpus_per_env)(_EnvActor)
            self._actors: list[Any] = [actor.remote(fn) for fn in env_fns]
            self._closed = False
            self._pending: list[Any] | None = None
            observation_space, action_space = ray.get(self._actors[0].spaces.remote())
            self._masks: list[Any] = [None] * len(env_fns)
            super().__init__(len(env_fns), observation_space, action_space)

        # --- the VecEnv contract ---------------------------------------------------------------

        def reset(self) -> Any:
            answers = ray.get(
                [a.reset.remote(self._seeds[i], self._options[i]) for i, a in enumerate(self._actors)]
            )
            obs, self.reset_infos, masks = zip(*answers, strict=True)
            self._masks = list(masks)
            self._reset_seeds()
            self._reset_options()
            return self._stack(obs)

        def step_async(self, actions: np.ndarray) -> None:
            self._pending = [a.step.remote(act) for a, act in zip(self._actors, actions, strict=True)]

        def step_wait(self) -> Any:
            assert self._pending is not None, "step_wait without step_async"
            answers = ray.get(self._pending)
            self._pending = None
            obs, rewards, dones, infos, reset_infos, masks = zip(*answers, strict=True)
            self.reset_infos = reset_infos
            self._masks = list(masks)
            return (
                self._stack(obs),
                np.array(rewards, dtype=np.float32),
                np.array(dones, dtype=bool),
                list(infos),
            )

        def close(self) -> None:
            if self._closed:
                return
            self._closed = True
            if self._pending is not None:
                ray.get(self._pending)
            try:
                ray.get([a.close.remote() for a in self._actors])
            finally:
                for a in self._actors:
                    ray.kill(a)
                if self._owns_ray:
                    ray.shutdown()

        def env_method(self, method_name: str, *args: Any, indices: Any = None, **kwargs: Any) -> list[Any]:
            chosen = self._get_indices(indices)
            if method_name == "action_masks" and not args and not kwargs and self._pending is None:
                if all(self._masks[i] is not None for i in chosen):
                    return [self._masks[i] for i in chosen]
            return list(ray.get([self._actors[i].call.remote(method_name, args, kwargs) for i in chosen]))

        def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
            return list(
                ray.get([self._actors[i].get_attr.remote(attr_name) for i in self._get_indices(indices)])
            )

        def has_attr(self, attr_name: str) -> bool:
            return all(ray.get([a.has_attr.remote(attr_name) for a in self._actors]))

        def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
            ray.get([self._actors[i].set_attr.remote(attr_name, value) for i in self._get_indices(indices)])

        def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
            return list(
                ray.get(
                    [self._actors[i].is_wrapped.remote(wrapper_class) for i in self._get_indices(indices)]
                )
            )

        def get_images(self) -> Sequence[np.ndarray | None]:
            return [None] * self.num_envs

        # --- helpers -------------------------------------------------------------------------

        def _stack(self, obs: Iterable[Any]) -> Any:
            items = list(obs)
            if isinstance(items[0], dict):
                return {k: np.stack([o[k] for o in items]) for k in items[0]}
            return np.stack(items)

    _CLASS = _RayVecEnv
    return _CLASS
