"""Structured fix actions: the short forms people type, and their validation."""

from __future__ import annotations

import pytest

from hpcmem.kb.lessons.actions import describe_action, parse_action, validate_action
from hpcmem.kb.errors import InputError


@pytest.mark.parametrize(
    "text, expected",
    [
        ("--mem=32G", {"type": "sbatch", "option": "--mem", "to": "32G"}),
        ("--mem 8G->32G", {"type": "sbatch", "option": "--mem", "from": "8G", "to": "32G"}),
        ("--mem=8G -> 32G", {"type": "sbatch", "option": "--mem", "from": "8G", "to": "32G"}),
        ("--time 4:00:00→12:00:00", {"type": "sbatch", "option": "--time", "from": "4:00:00", "to": "12:00:00"}),
        ("sbatch --time=12:00:00", {"type": "sbatch", "option": "--time", "to": "12:00:00"}),
        ("-p gpu", {"type": "sbatch", "option": "--partition", "to": "gpu"}),
        ("--gres=gpu:a100:1", {"type": "sbatch", "option": "--gres", "to": "gpu:a100:1"}),
        ("-C avx512", {"type": "sbatch", "option": "--constraint", "to": "avx512"}),
        ("--exclusive", {"type": "sbatch", "option": "--exclusive", "to": None}),
        ("module load cuda/12.4", {"type": "module", "op": "load", "name": "cuda/12.4"}),
        ("module swap cuda/11.8 cuda/12.4", {"type": "module", "op": "swap", "from": "cuda/11.8", "name": "cuda/12.4"}),
        ("module purge", {"type": "module", "op": "purge"}),
        ("export NCCL_IB_DISABLE=1", {"type": "env", "name": "NCCL_IB_DISABLE", "value": "1"}),
        ("OMP_NUM_THREADS=8", {"type": "env", "name": "OMP_NUM_THREADS", "value": "8"}),
        ("export PYTORCH_CUDA_ALLOC_CONF='expandable_segments:True'",
         {"type": "env", "name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segments:True"}),
        ("run: pip install --user pandas", {"type": "command", "command": "pip install --user pandas"}),
        ("conda activate md", {"type": "command", "command": "conda activate md"}),
        ('{"type": "env", "name": "X", "value": "1"}', {"type": "env", "name": "X", "value": "1"}),
    ],
)
def test_parse_action(text: str, expected: dict):
    assert parse_action(text) == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty"),
        ("--memory=4G", "unknown sbatch option '--memory'"),
        ("--mem", "needs a value"),
        ("module frob x", "unknown module operation"),
        ("module swap cuda/12.4", "needs two modules"),
        ("module load a b", "one module per action"),
        ('{"type": "teleport"}', "type one of"),
        ('{"type": "env", "name": "X"}', "needs a non-empty 'value'"),
        ('{"type": "command", "command": ["rm"]}', "needs a non-empty 'command'"),
        ("{not json", "not valid JSON"),
    ],
)
def test_bad_actions_are_input_errors(text: str, message: str):
    with pytest.raises(InputError, match=message):
        parse_action(text)


def test_nested_values_rejected():
    with pytest.raises(InputError, match="plain value"):
        validate_action({"type": "sbatch", "option": "--mem", "to": {"x": 1}})


@pytest.mark.parametrize(
    "text, shown",
    [
        ("--mem 8G->32G", "sbatch --mem=32G  (was 8G)"),
        ("module swap cuda/11.8 cuda/12.4", "module swap cuda/11.8 cuda/12.4"),
        ("export X='a b'", "export X='a b'"),
        ("run: make -j8", "make -j8"),
    ],
)
def test_describe_round_trips_the_meaning(text: str, shown: str):
    assert describe_action(parse_action(text)) == shown
