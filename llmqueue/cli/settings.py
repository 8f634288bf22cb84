"""The ``KEY=VALUE`` options of the commands (``--set``, a sweep's ``--grid``), read one way.

``--set`` (and ``--grid``) also take vLLM's names of four engine keys
(:data:`ALIASES`: ``max_num_batched_tokens=8192`` is ``bmax=8192``); they are
read as llmqueue's own names, which every output and ``--json`` shows."""

from __future__ import annotations

from typing import Dict, Optional, Sequence

#: vLLM's engine arguments (``vllm serve --max-num-seqs``...) that ``--set``
#: takes for llmqueue's keys; ``gpu_memory_utilization`` has one name in both.
ALIASES: Dict[str, str] = {
    "max_num_batched_tokens": "bmax",
    "max_num_seqs": "kmax",
    "block_size": "kv_block",
    "enable_chunked_prefill": "chunked",
}


def canonical(key: str) -> str:
    """llmqueue's name of ``--set`` key ``key`` (a vLLM name of :data:`ALIASES`
    becomes llmqueue's; any other key is itself)."""
    return ALIASES.get(key, key)


def pairs(given: Sequence[str], option: str = "--set") -> Dict[str, str]:
    """``KEY=VALUE`` texts of ``option`` as a dict (spaces around each part
    dropped; a later key wins).  For ``--set``, a vLLM name of :data:`ALIASES`
    becomes llmqueue's; a key given under both names with values that differ
    is a ValueError."""
    out: Dict[str, str] = {}
    named: Dict[str, str] = {}  # the name each key was last given under
    for pair in given:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{option} takes KEY=VALUE; got {pair!r}")
        name, value = key.strip(), value.strip()
        key = canonical(name) if option == "--set" else name
        if key in out and named[key] != name and not _same(key, out[key], value):
            raise ValueError(f"{key} given twice: {option} {named[key]}={out[key]} and "
                             f"{option} {name}={value} ({_spelled(key)}); give it once")
        out[key], named[key] = value, name
    return out


def _spelled(key: str) -> str:
    """``max_num_seqs is vLLM's name of kmax``."""
    names = [alias for alias, target in ALIASES.items() if target == key]
    return f"{' and '.join(names)} {'is' if len(names) == 1 else 'are'} vLLM's name of {key}"


def _same(key: str, first: str, second: str) -> bool:
    """Whether two texts of engine key ``key`` mean one value (``true`` and
    ``True``, ``8192`` and ``8_192``); a text the key cannot read is not the same."""
    if first == second:
        return True
    from llmqueue.experiments.base import ENGINE_PARAMS
    param = ENGINE_PARAMS[key]
    try:
        return bool(param.parse(key, first) == param.parse(key, second))
    except ValueError:
        return False


def overrides(given: Sequence[str], scheduler: Optional[str]) -> Dict[str, str]:
    """The ``--set KEY=VALUE`` pairs as a dict, with ``--scheduler`` as the
    ``scheduler`` key (given both ways, they must agree)."""
    out = pairs(given)
    if scheduler is not None:
        if out.get("scheduler", scheduler) != scheduler:
            raise ValueError(f"scheduler given twice: --scheduler {scheduler} and --set "
                             f"scheduler={out['scheduler']}; give it once")
        out["scheduler"] = scheduler
    return out
