"""The named string options of the configs, each listed once, and how they are checked.

Each option is a `Literal` (mypy checks it) whose values (`get_args`) feed the
validation of configs read from YAML or the command line, the CLI's choices and
the error that names the valid ones. Eviction policies and attention backends are
strategies in registries (`cache.eviction.EVICTION_POLICIES`,
`model.backends.ATTENTION_BACKENDS`); their names are listed here too, so that a
config checks them without importing the cache or the model (the tests hold the
lists equal).
"""

from __future__ import annotations

from dataclasses import field
from typing import Any, Literal, TypeVar, get_args

from penelope_engine.errors import ConfigError, UnknownNameError

EvictionPolicyName = str
EVICTION_NAMES: tuple[str, ...] = ("lru", "penelope", "greedydual", "return_aware")
# How a step's attention runs (`model.backends.ATTENTION_BACKENDS` describes each).
Attention = Literal["auto", "pieces", "sdpa", "flex"]
ATTENTION_NAMES: tuple[Attention, ...] = get_args(Attention)
WritePolicy = Literal["off", "write_through", "write_back"]
AdmissionOrder = Literal["fcfs", "program", "aged", "shortest"]
RetentionMode = Literal["none", "ttl", "return_aware"]
# The model and KV dtypes (`tiers.kv_pool.DTYPES` maps them to torch's).
DType = Literal["float32", "float16", "bfloat16"]
DTYPE_NAMES: tuple[str, ...] = get_args(DType)
# How the linear layers hold their weights (`model.weight_formats.WEIGHT_FORMATS` says what
# each runs): in the model dtype, or int8 per output channel / int4 per group of 32 inputs
# for decode steps.
Weights = Literal["float", "int8", "int4"]
WEIGHT_NAMES: tuple[Weights, ...] = get_args(Weights)
# The decoder architectures (`model.hf_checkpoint.ARCHITECTURES` maps them to HF's classes).
Arch = Literal["llama", "qwen3"]
ARCH_NAMES: tuple[Arch, ...] = get_args(Arch)

WRITE_POLICIES: tuple[WritePolicy, ...] = get_args(WritePolicy)
ADMISSION_ORDERS: tuple[AdmissionOrder, ...] = get_args(AdmissionOrder)
RETENTIONS: tuple[RetentionMode, ...] = get_args(RetentionMode)

_Option = TypeVar("_Option", bound=str)


def with_help(default: Any, help: str) -> Any:
    """A config field with its `--help` text (`penelope_cli.helpformat` builds options
    from it): `x: int = with_help(3, "what x does")`."""
    return field(default=default, metadata={"help": help})


class _CheckedInPostInit:
    """Marks a Literal field that `__post_init__` checks: loaders that read annotations
    (pydantic, for the serve config's YAML) take it as a str, so a wrong value gets
    the config's own error, which names the valid ones."""

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        return handler(str)


CHECKED_IN_POST_INIT = _CheckedInPostInit()


def one_of(allowed: tuple[_Option, ...], value: str, what: str) -> _Option:
    """`value` as one of `allowed` (a Literal's values); ConfigError naming them otherwise."""
    for option in allowed:
        if value == option:
            return option
    raise ConfigError(f"{what} must be one of {', '.join(allowed)}, got {value!r}")


def known(names: tuple[str, ...], value: str, kind: str) -> None:
    """`UnknownNameError` listing `names` unless `value` is one (as a registry says it)."""
    if value not in names:
        raise UnknownNameError(f"unknown {kind} {value!r}; valid: {', '.join(names)}")


def as_write_policy(value: str) -> WritePolicy:
    return one_of(WRITE_POLICIES, value, "write_policy")


def as_admission_order(value: str) -> AdmissionOrder:
    return one_of(ADMISSION_ORDERS, value, "admission")


def as_retention(value: str) -> RetentionMode:
    return one_of(RETENTIONS, value, "retention")


def as_arch(value: str) -> Arch:
    return one_of(ARCH_NAMES, value, "arch")
