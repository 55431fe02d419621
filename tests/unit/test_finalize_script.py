"""The finalize script is composed from each owner's fragment (no Redis needed)."""

from __future__ import annotations

import pytest

from bot.store.finalize_script import assemble, steps
from bot.store.lua_parts import Fragment, Part, call, flatten
from bot.store.runs import END_RUN


def test_each_fragment_reaches_only_its_own_keys_and_args() -> None:
    for fragment in steps(END_RUN):
        assert "KEYS[" not in fragment.lua and "ARGV[" not in fragment.lua, fragment.name
        assert f"local function {fragment.name}(k, a" in fragment.lua


def test_the_body_lays_the_fragments_out_in_order() -> None:
    lua = assemble(END_RUN)
    assert "recheck_run({KEYS[1]}, {ARGV[1], ARGV[2]})" in lua
    assert "local ended, tools, inbox, receipts = end_run({KEYS[2], KEYS[3]," in lua
    assert "put_final_progress({KEYS[12]}, {ARGV[16], ARGV[17]," in lua
    assert "ARGV[22]}, tools)" in lua  # the tool count end_run read from the run's hash
    assert "apply_metrics({KEYS[13], KEYS[14]}, {ARGV[23]})" in lua
    assert "return {1 + leave_join({KEYS[15], KEYS[16], KEYS[17], KEYS[18]}" in lua
    # the estimates' sample: laid out last, called before the join's return
    assert (
        "record_sample({KEYS[19]}, {ARGV[28], ARGV[29], ARGV[30]})\nreturn {1 + leave_join" in lua
    )
    assert sum(f.keys for f in steps(END_RUN)) == 19


@pytest.mark.parametrize(
    ("keys", "args"), [(("a",), ()), ((), (1,)), (("a", "b"), (1,))], ids=["args", "keys", "both"]
)
def test_a_part_must_match_its_fragment(keys: tuple[str, ...], args: tuple[int, ...]) -> None:
    fragment = Fragment(name="f", lua="", keys=1, args=1)
    with pytest.raises(ValueError, match="f takes 1 keys and 1 args"):
        Part(fragment=fragment, keys=keys, args=args)


def test_call_and_flatten_agree() -> None:
    one = Fragment(name="one", lua="", keys=1, args=2)
    two = Fragment(name="two", lua="", keys=2, args=0)
    parts = (
        Part(fragment=one, keys=("k1",), args=("a", 1)),
        Part(fragment=two, keys=("k2", "k3"), args=()),
    )
    assert flatten(parts) == (["k1", "k2", "k3"], ["a", 1])
    assert call(two, key_at=2, arg_at=3) == "two({KEYS[2], KEYS[3]}, {})"
