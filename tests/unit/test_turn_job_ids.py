"""Turn job ids sort by creation time, also for messages in the same millisecond."""

from bot.store.jobs import TurnJobIds


def test_ids_from_one_maker_strictly_increase_and_sort_as_text() -> None:
    ids = TurnJobIds()
    made = [ids.new(f"{n:032x}") for n in range(200)]  # far more than one per millisecond
    stamps = [int(i.split("-")[1]) for i in made]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    assert made == sorted(made)


def test_a_given_time_is_used_as_it_is() -> None:
    assert TurnJobIds().new("abcdef0123456789", now=1.5) == "turn-0000000001500-abcdef012345"
