"""`fit_group`, the one fitting rule with its policy named: `Fit.DROP` (training, `rm eval`) and `Fit.KEEP_END`
(`rm score`), case by case, with ids worked out by hand. Rules 1 to 3 (the prompt's turns) are test_truncation.py's.
"""

import ast
from pathlib import Path

import pytest

from rm.tokens.truncation import Fit, fit_group, search_room

RM = Path(__file__).resolve().parents[2] / "rm"


def never(*_) -> list:
    raise AssertionError("asked although it need not be")


def test_drop_a_response_with_no_room_for_a_prompt_token_leaves_a_group_that_still_compares():
    # room beside the prefix = 6 - 1 = 5: [9..13] (5 tokens) would leave no prompt token; [8] and [7, 7] stay,
    # and the prompt fits beside the longer of them: 6 - 1 - 2 = 3 tokens
    asked = []
    got = fit_group([2, 3, 4], [[8], [9, 10, 11, 12, 13], [7, 7]], 6, [1], never, Fit.DROP,
                    lambda keep: asked.append(keep) or True)  # fmt: skip
    assert asked == [[0, 2]] and got.kept == [0, 2] and got.responses_dropped == 1
    (part,) = got.parts
    assert part.prompt_ids == [1, 2, 3, 4] and part.response_ids == [[8], [7, 7]] and not part.truncated


def test_drop_a_group_with_no_comparison_left_goes_whole_and_counts_no_response():
    got = fit_group([2, 3, 4], [[8], [9, 10, 11, 12, 13]], 6, [1], never, Fit.DROP, lambda keep: False)
    assert got.dropped and got.parts == [] and got.kept == [] and got.responses_dropped == 0
    both_too_long = fit_group([2], [[8, 9, 10], [7, 7, 7]], 3, [], never, Fit.DROP)  # default: one must stay
    assert both_too_long.dropped and not both_too_long.prompt_truncated


def test_drop_asks_no_comparison_when_every_response_stays():
    # an empty prompt loses nothing: a response that fills the room beside the prefix (3 - 1 = 2) stays
    got = fit_group([], [[8, 9], [7]], 3, [1], never, Fit.DROP, never)
    assert got.kept == [0, 1] and got.responses_dropped == 0 and got.parts[0].prompt_ids == [1]


def test_drop_searches_later_turns_for_the_room_beside_the_responses_that_stay():
    # [9] x 5 leaves (5 >= 5 - 1); beside [8] the prompt has 5 - 1 - 1 = 3 tokens: the later turn [5, 6, 7] fits
    rooms = []
    prompt, responses = [2, 3, 4, 5, 6, 7], [[8], [9] * 5]
    got = fit_group(prompt, responses, 5, [1], lambda room: rooms.append(room) or [[5, 6, 7]], Fit.DROP)
    assert rooms == [3] == [search_room(prompt, responses, 5, [1])]
    assert got.parts[0].prompt_ids == [1, 5, 6, 7] and got.prompt_truncated and not got.cut_inside_turn
    assert search_room([2, 3], responses, 5, [1]) is None  # it fits: nothing to search
    assert search_room(prompt, [[9] * 5, [9] * 4], 5, [1]) is None  # no response stays: the group goes


def test_keep_end_fits_a_group_that_cannot_fit_together_one_response_at_a_time():
    # together: 7 - 1 - 7 < 0. Alone, [8] leaves 7 - 1 - 1 = 5 tokens: the later turn [4, 5, 6, 7] fits; the long
    # response leaves none and keeps its last 7 - 1 = 6 tokens, where the reward is read
    rooms = []
    got = fit_group([2, 3, 4, 5, 6, 7], [[8], [10, 11, 12, 13, 14, 15, 16]], 7, [1],
                    lambda room: rooms.append(room) or [[4, 5, 6, 7]], Fit.KEEP_END)  # fmt: skip
    assert rooms == [5] and got.kept == [0, 1] and not got.dropped and got.responses_dropped == 0
    short, long = got.parts
    assert (short.prompt_ids, short.response_ids, short.truncated) == ([1, 4, 5, 6, 7], [[8]], True)
    assert (long.prompt_ids, long.response_ids) == ([1], [[11, 12, 13, 14, 15, 16]]) and long.response_truncated


def test_keep_end_keeps_a_group_that_fits_together_as_one_part():
    got = fit_group([2, 3], [[8], [9, 10]], 6, [1], never, Fit.KEEP_END)
    (part,) = got.parts
    assert part.prompt_ids == [1, 2, 3] and part.response_ids == [[8], [9, 10]] and not part.truncated


def test_no_prompt_token_left_drops_the_group_or_scores_the_responses_together_without_it():
    # room = 3 - 1 - 2 = 0: training drops the pair; scoring keeps it, the prompt cut to nothing and flagged
    assert fit_group([2, 3], [[8, 9], [7, 7]], 3, [1], never, Fit.DROP).dropped
    got = fit_group([2, 3], [[8, 9], [7]], 3, [1], lambda room: [], Fit.KEEP_END)
    (part,) = got.parts
    assert part.prompt_ids == [1] and part.response_ids == [[8, 9], [7]] and part.cut_inside_turn and part.truncated


def calls_in_rm(name: str) -> set[str]:
    """Modules of rm/ that call `name` or pass it as a keyword."""
    found = set()
    for path in RM.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            called = isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == name
            if called or (isinstance(node, ast.keyword) and node.arg == name):
                found.add(str(path.relative_to(RM)))
    return found


@pytest.mark.slow
def test_every_caller_fits_through_fit_group_with_its_policy_named():
    """A second home of rule 4 (a caller's own response filter or one-at-a-time fallback) would drift: training and
    `rm score` read the same long record differently the day one of them changes."""
    assert calls_in_rm("truncate_group") == calls_in_rm("keep_response_end") == {"tokens/truncation.py"}
    assert {"tokens/encode.py", "evaluation/score_file.py"} <= calls_in_rm("fit_group")
