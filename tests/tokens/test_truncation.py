"""The one fitting rule (rm/tokens/truncation.py), case by case, with ids worked out by hand."""

from rm.tokens.truncation import last_turn_start, later_turns, truncate_group, turn_starts

HH = "\n\nHuman: a\n\nAssistant: b\n\nHuman: c\n\nAssistant:"


def never() -> list:
    raise AssertionError("shorter prompts asked for although the prompt fits")


def test_later_turns_start_at_each_later_user_turn():
    assert list(later_turns(HH)) == ["\n\nHuman: c\n\nAssistant:"]
    assert list(later_turns("0123456789", (3, 7))) == ["3456789", "789"]
    assert list(later_turns("\n\nHuman: only\n\nAssistant:")) == []
    assert turn_starts(HH * 3, None, 25) == [46, 70, 92, 116] and turn_starts("0123456789", (0, 3, 7, 10), 4) == [7]
    assert last_turn_start(HH) == 24 and last_turn_start("\n\nHuman: only") is None


def test_a_prompt_that_fits_is_kept_whole_behind_the_prefix():
    got = truncate_group([5, 6, 7], [[8], [9, 10]], 6, [1], never)
    assert got.prompt_ids == [1, 5, 6, 7] and got.response_ids == [[8], [9, 10]] and not got.truncated


def test_a_long_prompt_loses_whole_leading_turns_first():
    # room = 7 - 1 (prefix) - 2 (longest response) = 4: [7, 8, 9] is the first shorter prompt that fits
    got = truncate_group([2, 3, 4, 5, 6, 7, 8, 9], [[8], [9, 10]], 7, [1], lambda: [[4, 5, 6, 7, 8], [7, 8, 9]])
    assert got.prompt_ids == [1, 7, 8, 9] and got.prompt_truncated and not got.cut_inside_turn


def test_a_last_turn_still_too_long_keeps_its_newest_tokens():
    got = truncate_group([2, 3, 4, 5, 6, 7], [[8], [9, 10]], 5, [1], lambda: [[4, 5, 6, 7]])
    assert got.prompt_ids == [1, 6, 7] and got.prompt_truncated and got.cut_inside_turn


def test_a_prompt_that_would_lose_every_token_drops_the_group_like_a_response_that_cannot_fit():
    """Room 0 left a reward read from the response alone (`collator.max_length=1` trained on single response
    tokens): training and eval now drop the group; `rm score` still scores what fits, and says it was cut."""
    assert truncate_group([2, 3], [[8, 9]], 3, [1], never).dropped  # room = 3 - 1 - 2 = 0
    assert truncate_group([2, 3], [[8], [9]], 1, [], never).dropped
    scored = truncate_group([2, 3], [[8, 9]], 3, [1], list, keep_response_end=True)
    assert scored.prompt_ids == [1] and scored.cut_inside_turn and scored.response_ids == [[8, 9]]
    assert truncate_group([], [[8, 9]], 3, [1], never).prompt_ids == [1]  # no prompt to lose: kept


def test_a_response_too_long_drops_the_group_or_keeps_its_end_when_scoring():
    assert truncate_group([2, 3], [[8], [4, 5, 6, 7]], 4, [1], never).dropped
    scored = truncate_group([2, 3], [[4, 5, 6, 7]], 4, [1], never, keep_response_end=True)
    assert scored.prompt_ids == [1] and scored.response_ids == [[5, 6, 7]] and scored.response_truncated
    assert truncate_group([2], [[8], [4, 5, 6, 7]], 3, [], never, keep_response_end=True).dropped  # a pair: dropped
