"""However concurrent requests are coalesced and cut into batches, each reward is the one `rm score`'s functions
give its text alone (1e-5); batches keep to the token budget, longest first, a group's responses together."""

import random
from concurrent.futures import ThreadPoolExecutor

import pytest
from serving import client, padded, reference, scorer_for, text_reference

from rm.collate.scoring import scored
from rm.evaluation.record_texts import GROUP_KEY, ScoreText
from rm.serve.batch_plan import Job, Part, plan
from rm.tokens.store import EncodedGroup

WORDS = "the a sky is blue two plus four makes six answer question why because water wet cold".split()


def sentence(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def turn(rng: random.Random, question: int, answer: int) -> str:
    return f"\n\nHuman: {sentence(rng, 1, question)}\n\nAssistant: {sentence(rng, 1, answer)}"


def flat_group(rng: random.Random, question: int, answer: int) -> list[str]:
    """No text, or 2, 3 or 5 flat texts of one prompt (a GRPO batch sent flat), which the server scores as a group."""
    prompt = turn(rng, question, answer) + f"\n\nHuman: {sentence(rng, 1, question)}\n\nAssistant:"
    return [prompt + " " + sentence(rng, 1, answer) for _ in range(rng.choice([0, 2, 3, 5]))]


def random_request(rng: random.Random) -> tuple[str, dict, list]:
    """(path, body, what each item's reference is): flat texts (some sharing a prompt), text groups, message groups,
    OpenRLHF queries."""
    kind = rng.choice(["score", "groups", "messages", "get_reward"])
    if kind == "score":
        texts = [turn(rng, 30, 20) for _ in range(rng.randint(1, 4))]
        texts += flat_group(rng, 30, 20)
        rng.shuffle(texts)
        return "/score", {"texts": texts}, [("text", t) for t in texts]
    if kind == "get_reward":
        queries = [turn(rng, 10, 10) for _ in range(2)] + flat_group(rng, 10, 10)
        body = {"query": queries, "prompts": queries, "labels": [None] * len(queries)}
        return "/get_reward", body, [("text", q) for q in queries]
    groups, refs = [], []
    for _ in range(rng.randint(1, 3)):
        if kind == "groups":
            prompt = f"\n\nHuman: {sentence(rng, 1, 40)}\n\nAssistant:"
            responses = [" " + sentence(rng, 1, 15) for _ in range(rng.randint(1, 6))]
            refs.append(("group", [ScoreText(GROUP_KEY, prompt, r) for r in responses]))
        else:
            prompt = [{"role": "user", "content": sentence(rng, 1, 25)}]
            responses = [sentence(rng, 1, 12) for _ in range(rng.randint(1, 5))]
            head = f"\n\nHuman: {prompt[0]['content']}\n\nAssistant:"  # HH text: the tiny tokenizer has no template
            refs.append(("group", [ScoreText(GROUP_KEY, head, " " + r) for r in responses]))
        groups.append({"prompt": prompt, "responses": responses})
    return "/score_groups", {"groups": groups}, refs


@pytest.mark.parametrize("layout", ["shared", "padded"])
def test_a_random_concurrent_mix_gets_rm_scores_rewards_whatever_the_batching(exported_tiny, layout):
    """60 random requests from 12 threads, a budget small enough that groups are cut into parts and batches mix
    requests, max_length 40 so that some texts are cut: every reward and flag equals the text's alone. The padded
    layout's batches are scored in two parts at once (--batch-threads 2)."""
    base = scorer_for(str(exported_tiny), max_length=40)
    scorer = base if layout == "shared" else padded(base)
    rng = random.Random(27 if layout == "shared" else 28)
    requests = [random_request(rng) for _ in range(60)]
    threads = 1 if layout == "shared" else 2
    with (
        client(scorer, max_batch_tokens=160, max_wait_ms=30, batch_threads=threads) as c,
        ThreadPoolExecutor(12) as pool,
    ):
        answers = list(pool.map(lambda r: c.post(r[0], json=r[1]), requests))
        rounds = list(c.app.state.batcher.rounds)
    assert max(rounds) > 1  # requests were coalesced
    truncated = 0
    for (path, _, refs), got in zip(requests, answers, strict=True):
        assert got.status_code == 200, got.text
        body = got.json()
        for k, (kind, ref) in enumerate(refs):
            if kind == "text":
                expected = [text_reference(scorer, ref)]
                rewards, flags = [body["rewards"][k]], [body["truncated"][k]]
            else:
                expected = reference(scorer, ref)
                rewards, flags = body["rewards"][k], body["truncated"][k]
            assert rewards == pytest.approx([r for r, _ in expected], abs=1e-5), path
            assert flags == [t for _, t in expected]
            truncated += sum(flags)
    assert truncated > 0  # the cut texts were checked too


def group(prompt: int, responses: list[int], tag: int = 0) -> EncodedGroup:
    """A prompt of `prompt` tokens and responses of these lengths (ids `tag` and `tag + 1`)."""
    return scored([tag] * prompt, [[tag + 1] * r for r in responses])


def seq(prompt: int, response: int, tag: int = 0) -> EncodedGroup:
    """One text: a group of one."""
    return group(prompt, [response], tag)


def test_plan_keeps_to_the_budget_longest_first_and_groups_whole():
    """Shared layout: a group's part is its prompt once plus its responses; parts are packed first-fit into rows
    as wide as the batch's first (longest) part; a group too large for the budget is cut into parts."""
    done = lambda rewards: None  # noqa: E731
    small = Job("a", [[seq(5, 3)], [seq(2, 2)]], done)
    three = Job("b", [[group(10, [4, 6, 2], 7)]], done)  # segment 10 + 12 = 22
    huge = Job("c", [[group(30, [10] * 4, 9)]], done)  # 30 + 40 = 70 > the budget of 64
    batches = plan([small, three, huge], budget=64, shared=True, max_row=1000)
    widths = [[p.width for p in batch] for batch in batches]
    flat = [w for batch in widths for w in batch]
    assert flat == sorted(flat, reverse=True)  # longest first
    for batch in batches:  # rows of the first part's width, packed first-fit: within the budget
        assert batch_slots(batch) <= 64 or len(batch) == 1
    parts_c = [p for batch in batches for p in batch if p.job is huge]
    assert [len(p.group.response_ids) for p in parts_c] == [3, 1]  # 30 + 30 = 60 fits, the fourth makes its own part
    assert [p.start for p in parts_c] == [0, 3]  # where each part's rewards go among the item's
    parts_b = [p for batch in batches for p in batch if p.job is three]
    assert len(parts_b) == 1 and len(parts_b[0].group.response_ids) == 3  # kept whole: its prompt computed once
    padded_batches = plan([small, three], budget=40, shared=False, max_row=1000)
    for batch in padded_batches:  # one row per response, as wide as the longest
        rows = [len(p.group.prompt_ids) + len(r) for p in batch for r in p.group.response_ids]
        assert len(rows) * max(rows) <= 40 or len(batch) == 1


def batch_slots(batch: list[Part]) -> int:
    from rm.collate.token_budget import plan_rows

    lengths = [p.width for p in batch]
    return len(plan_rows(lengths, max(lengths))) * max(lengths)


def test_arrivals_join_the_next_batch_and_a_passed_over_job_is_served_within_two():
    """Continuous batching: jobs queued while the model runs are cut in with what is pending before the next batch
    (the widest full batch goes first), and a job passed over twice goes next whatever its length."""
    from rm.serve.batcher import Batcher

    done: dict[str, list] = {}
    order: list[list[str]] = []  # the jobs in each batch, in scoring order
    arrivals = [f"long{i}" for i in range(1, 5)]

    def make(name: str, length: int, items: int) -> Job:
        return Job(name, [[seq(1, length - 1)] for _ in range(items)], lambda r: done.setdefault(name, r))

    def forward(groups: list[EncodedGroup]) -> list[float]:
        if arrivals:  # a client answered by this batch is back with a long request while it runs
            batcher.queue.put(make(arrivals.pop(0), 20, 2))
        return [float(len(g.prompt_ids) + len(r)) for g in groups for r in g.response_ids]

    batcher = Batcher(forward, shared=False, max_batch_tokens=40, max_wait_ms=0)
    real_score = batcher._score
    batcher._score = lambda batch: (order.append(sorted({p.job.request_id for p in batch})), real_score(batch))
    batcher.queue.put(make("short", 4, 1))
    batcher.queue.put(make("long0", 20, 2))  # two rows of 20: a full batch of 40 slots
    batcher.start()
    batcher.stop()
    assert order[:3] == [["long0"], ["long1"], ["short"]]  # long1 came during batch 1; short waited two batches
    assert set(done) == {"short", *(f"long{i}" for i in range(5))}
    assert done["short"] == [[4.0]] and done["long3"] == [[20.0], [20.0]]


@pytest.mark.parametrize(("shared", "cached"), [(True, True), (True, False), (False, False)])
def test_an_item_of_several_groups_gets_its_rewards_in_text_order(shared, cached):
    """An item whose texts were encoded as several groups (a response fitted on its own), its groups cut into parts
    by a small budget and batched with another job: each reward lands at its text's flat index in the item."""
    from rm.serve.batcher import Batcher

    done: dict[str, list] = {}
    seen: list[list[EncodedGroup]] = []

    def forward(groups: list[EncodedGroup]) -> list[float]:  # a reward that names its response: tag and length
        seen.append(groups)
        return [float(100 * g.prompt_ids[0] + len(r)) for g in groups for r in g.response_ids]

    item = [group(6, [3, 9, 5, 7], 1), group(2, [30], 3), group(6, [4, 2], 1)]  # one prompt, the long text alone
    other = [[seq(4, 8, 5)], [group(3, [1, 2], 7)]]
    expected = [100.0 * g.prompt_ids[0] + len(r) for g in item for r in g.response_ids]
    batcher = Batcher(forward, shared=shared, max_batch_tokens=24, max_wait_ms=0, max_row=20, cached=cached)
    batcher.queue.put(Job("item", [item], lambda r: done.setdefault("item", r)))
    batcher.queue.put(Job("other", other, lambda r: done.setdefault("other", r)))
    batcher.start()
    batcher.stop()
    assert done["item"] == [expected]
    assert done["other"] == [[508.0], [701.0, 702.0]]
    assert len(seen) > 1 and max(len(g.response_ids) for b in seen for g in b) < 4  # the group was cut into parts
    assert batcher.scored == 10


@pytest.mark.parametrize("layout", ["shared", "padded"])
def test_a_group_with_a_response_fitted_on_its_own_keeps_each_texts_reward_and_flag(exported_tiny, layout):
    """/score_groups with a response too long for max_length even alone: `rm score` then fits the group's texts one
    by one (an item of several groups); the server answers each text's reward and flag in the request's order."""
    base = scorer_for(str(exported_tiny), max_length=40)
    scorer = base if layout == "shared" else padded(base)
    prompt = "\n\nHuman: Why is the sky blue on a clear day?\n\nAssistant:"
    responses = [" Light scatters.", " " + " ".join(WORDS * 4), " Air.", " Blue light scatters most."]
    texts = [ScoreText(GROUP_KEY, prompt, r) for r in responses]
    groups = scorer.encode(texts)
    assert len(groups) > 1 and sum(len(g.response_ids) for g in groups) == 4  # fitted one by one
    expected = reference(scorer, texts)
    with client(scorer, max_batch_tokens=64) as c:
        got = c.post("/score_groups", json={"groups": [{"prompt": prompt, "responses": responses}]})
    assert got.status_code == 200, got.text
    assert got.json()["rewards"] == [pytest.approx([r for r, _ in expected], abs=1e-5)]
    assert got.json()["truncated"] == [[t for _, t in expected]]
    assert len({round(r, 6) for r, _ in expected}) == 4  # distinct rewards: a mix-up of order would show


def test_serving_plans_on_scorings_unit():
    """rm serve plans and scores `EncodedGroup`s with `rm.collate.scoring`'s helpers: no second text unit, no
    second segment count (a second copy of either drifts from what the layouts lay out)."""
    from pathlib import Path

    import rm.serve

    for path in Path(rm.serve.__file__).parent.glob("*.py"):
        source = path.read_text()
        for name in ("ScoreSeq", "prompt_runs", "def segment", "def shared_length", "same_ids"):
            assert name not in source, f"{path.name} names {name}"


def test_a_batch_splits_into_parts_in_order_of_about_equal_tokens():
    """--batch-threads' parts: at most n, the groups in their order, each part within one group of total / n."""
    from rm.serve.batch_plan import cost, split

    rng = random.Random(3)
    groups = [group(rng.randint(1, 30), [rng.randint(1, 20) for _ in range(rng.randint(1, 4))]) for _ in range(40)]
    for n in (1, 2, 3, 7):
        for shared in (True, False):
            parts = split(groups, n, shared)
            assert len(parts) == n and [g for p in parts for g in p] == groups
            total, largest = sum(cost(g, shared) for g in groups), max(cost(g, shared) for g in groups)
            assert all(abs(sum(cost(g, shared) for g in p) - total / n) <= largest for p in parts)
    assert split(groups[:2], 3, True) == [[groups[0]], [groups[1]]]
