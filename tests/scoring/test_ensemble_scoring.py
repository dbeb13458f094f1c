"""An ensemble scores every text with each member on one batch: each member's column equals that member loaded and
scored alone (1e-5), whatever the layout; LoRA members of one base hold it once (counted in parameters, not RSS);
members that cannot share one batch plan are refused in one line; the per-response numbers equal numpy's."""

import logging
import shutil

import numpy as np
import pytest
from scoring.ensemble_members import adapter_numel, export, lora_run

from rm.collate.scoring import PaddedLayout
from rm.errors import ConfigError, DataError
from rm.evaluation.record_texts import texts_of
from rm.evaluation.score_file import default_layout, encode_texts, score_outputs
from rm.scoring.ensemble import EnsembleRule, RewardRecordsOnly
from rm.scoring.ensemble_model import ensemble_layout, load_ensemble
from rm.scoring.inference import load
from rm.tokens.tokenizer import special_prefix

TEXTS = [
    "\n\nHuman: How do I bake bread?\n\nAssistant: Mix flour, water, salt and yeast, then bake it.",
    "\n\nHuman: How do I bake bread?\n\nAssistant: Buy some.",
    "\n\nHuman: Name a colour.\n\nAssistant: Blue.",
    "\n\nHuman: Hi!\n\nAssistant: Hello, how can I help?\n\nHuman: Tell me a joke.\n\nAssistant: No.",
]


@pytest.fixture(scope="module")
def lora_runs(tokenizer, tmp_path_factory):
    root = tmp_path_factory.mktemp("lora_members")
    return [lora_run(tokenizer, root / f"run{i}", seed=i + 1) for i in range(3)]


def groups_of(tokenizer, max_length: int = 64):
    """The texts as `rm score` encodes `text` records; two share a prompt (one group of two on a cached prompt)."""
    return [g for t in TEXTS for g in encode_texts(tokenizer, texts_of({"text": t}, "t"), max_length,
                                                   special_prefix(tokenizer))]  # fmt: skip


def alone(name: str, tokenizer) -> np.ndarray:
    """The member loaded by itself (merged, for a LoRA run) and scored one text a batch, padded: [texts]."""
    loaded = load(name, device="cpu")
    return np.array(score_outputs(loaded.model, groups_of(tokenizer), PaddedLayout(tokenizer.pad_token_id), 1,
                                  loaded.device))[:, 0]  # fmt: skip


def test_lora_members_hold_one_base_and_score_as_each_alone(lora_runs, tokenizer):
    ensemble = load_ensemble([str(r) for r in lora_runs], device="cpu")
    assert ensemble.base_copies == 1
    # Every parameter the ensemble holds, each storage once: one base, plus each member's LoRA matrices and head copy.
    held = {p.untyped_storage().data_ptr(): p.numel() for p in ensemble.model.parameters()}
    single = sum(p.numel() for p in load(str(lora_runs[0]), device="cpu").model.parameters())  # merged: a base
    assert sum(held.values()) == single + sum(adapter_numel(r) for r in lora_runs)  # (peft keeps the head's original)
    assert sum(held.values()) < 1.5 * single  # three members loaded alone would hold 3 x single
    layout, cached = ensemble_layout(ensemble)
    assert cached is not None  # a group of two texts goes on its prompt's cache, the rest in packed rows
    got = np.array(score_outputs(ensemble.model, groups_of(tokenizer), layout, 3, ensemble.first.device))  # [n, M]
    for m, run in enumerate(lora_runs):
        np.testing.assert_allclose(got[:, m], alone(str(run), tokenizer), atol=1e-5, rtol=0)
    on_cache = cached.rewards([groups_of(tokenizer)[0]])  # the texts that share a prompt, on its cache
    assert on_cache.shape == (1, 3)
    assert len({round(float(v), 4) for v in got[0]}) == 3  # the members differ: a mixed-up column would show


def test_a_member_on_another_base_is_loaded_whole(lora_runs, tokenizer, tmp_path, caplog):
    other = lora_run(tokenizer, tmp_path / "other", seed=9, base_seed=5)
    with caplog.at_level(logging.INFO, logger="rm.scoring"):
        ensemble = load_ensemble([str(lora_runs[0]), str(other), str(lora_runs[1])], device="cpu")
    assert ensemble.base_copies == 2
    assert f"{other}: its frozen base weights differ from {lora_runs[0]}'s: loaded whole" in caplog.text
    got = np.array(score_outputs(ensemble.model, groups_of(tokenizer), ensemble_layout(ensemble)[0], 4, "cpu"))
    for m, name in enumerate([lora_runs[0], other, lora_runs[1]]):
        np.testing.assert_allclose(got[:, m], alone(str(name), tokenizer), atol=1e-5, rtol=0)


def test_a_finished_run_shares_its_base_only_where_a_checkpoint_keeps_its_final_weights(lora_runs, tmp_path, caplog,
                                                                                        tokenizer):  # fmt: skip
    from rm.cli import main as cli

    runs = [tmp_path / "kept_a", tmp_path / "kept_b", tmp_path / "merged"]
    for run, source in zip(runs, lora_runs, strict=True):  # finished runs with their export (the final weights merged)
        shutil.copytree(source, run)
        assert cli(["export", str(run), "--out", str(run / "export")]) == 0
    (runs[2] / "eval.json").write_text('{"train": {"steps": 3}}')  # its final step has no checkpoint
    with caplog.at_level(logging.INFO, logger="rm.scoring"):
        ensemble = load_ensemble([str(r) for r in runs], device="cpu")
    assert ensemble.base_copies == 2  # kept_a and kept_b on one base (their final checkpoints); merged whole
    assert f"{runs[2]}: its LoRA weights are merged into its export" in caplog.text
    got = np.array(score_outputs(ensemble.model, groups_of(tokenizer), ensemble_layout(ensemble)[0], 4, "cpu"))
    for m, run in enumerate(runs):  # each alone is its export
        np.testing.assert_allclose(got[:, m], alone(str(run), tokenizer), atol=1e-5, rtol=0)


def test_exports_and_a_source_given_twice(tokenizer, tmp_path):
    a, b = export(tokenizer, tmp_path / "a", seed=1), export(tokenizer, tmp_path / "b", seed=2)
    ensemble = load_ensemble([str(a), str(b), str(a)], device="cpu")
    assert ensemble.base_copies == 2  # the export given twice is loaded once
    layout = ensemble_layout(ensemble, prefix_cache=False)[0]
    got = np.array(score_outputs(ensemble.model, groups_of(tokenizer), layout, 2, "cpu"))
    np.testing.assert_allclose(got[:, 0], alone(str(a), tokenizer), atol=1e-5, rtol=0)
    np.testing.assert_allclose(got[:, 1], alone(str(b), tokenizer), atol=1e-5, rtol=0)
    assert np.array_equal(got[:, 0], got[:, 2])


def test_members_that_read_texts_differently_are_refused_in_one_line(tokenizer, tmp_path, synthetic_root):
    a, short = export(tokenizer, tmp_path / "a", seed=1), export(tokenizer, tmp_path / "short", seed=2, max_length=32)
    with pytest.raises(ConfigError) as refused:
        load_ensemble([str(a), str(short)], device="cpu")
    assert str(refused.value) == (
        f"ensemble: {a} and {short} differ in their max_length (64 against 32); give them one --max-length"
    )
    load_ensemble([str(a), str(short)], device="cpu", max_length=48)  # one --max-length: accepted

    from rm.data.load import load_pairs
    from rm.tokens.tokenizer import train_bpe

    pairs = load_pairs(str(synthetic_root), "train", [])
    other = train_bpe([t for p in pairs for t in (p.prompt, p.chosen)], vocab_size=400)
    odd = export(other, tmp_path / "odd", seed=1)
    with pytest.raises(ConfigError) as refused:
        load_ensemble([str(a), str(odd)], device="cpu")
    assert "\n" not in str(refused.value)
    assert str(refused.value).startswith(f"ensemble: {a} and {odd} differ in their tokenizer")
    with pytest.raises(ConfigError, match="an ensemble needs two or more members, got 1"):
        load_ensemble([str(a)], device="cpu")


def test_the_numbers_are_numpy_s():
    rng = np.random.default_rng(0)
    raw = rng.normal(size=(7, 3)) * 3
    rule = EnsembleRule(("a", "b", "c"), k=1.5, reward="conservative")
    got = rule.combine(raw.tolist())
    mean, std = raw.mean(axis=1), np.std(raw, axis=1, ddof=0)
    np.testing.assert_allclose([c.mean for c in got], mean, atol=1e-12)
    np.testing.assert_allclose([c.std for c in got], std, atol=1e-12)
    np.testing.assert_allclose([c.conservative for c in got], mean - 1.5 * std, atol=1e-12)
    assert [c.reward for c in got] == [c.conservative for c in got]
    assert [c.members for c in got] == raw.tolist()
    lowest = EnsembleRule(("a", "b", "c"), reward="min").combine(raw.tolist())
    assert [c.reward for c in lowest] == raw.min(axis=1).tolist()

    norms = ({"mean": 1.0, "std": 2.0}, {"mean": -1.0, "std": 0.5}, {"mean": 0.0, "std": 1.0})
    normed = EnsembleRule(("a", "b", "c"), norms=norms).combine(raw.tolist())
    scaled = (raw - [1.0, -1.0, 0.0]) / [2.0, 0.5, 1.0]
    np.testing.assert_allclose([c.mean for c in normed], scaled.mean(axis=1), atol=1e-12)
    np.testing.assert_allclose([c.std for c in normed], scaled.std(axis=1), atol=1e-12)

    same = EnsembleRule(("a", "a", "a")).combine([[0.1] * 3, [1 / 3] * 3, [-7.77] * 3])
    assert [c.std for c in same] == [0.0, 0.0, 0.0]  # exactly: members that agree have no spread
    np.testing.assert_allclose([c.mean for c in same], [0.1, 1 / 3, -7.77], rtol=1e-15)
    broken = EnsembleRule(("a", "b")).combine([[1.0, float("nan")], [float("inf"), 2.0]])
    assert all(c.reward is c.mean is c.std is c.conservative is None for c in broken)
    assert broken[0].members == [1.0, None]
    assert [c.reward for c in EnsembleRule(("a", "b"), reward="min").combine([[float("inf"), 2.0]])] == [None]

    attributes = EnsembleRule(("a", "b"), attributes=("x", "y")).combine([[[1.0, 2.0, 3.0], [3.0, 4.0, 9.0]]])
    assert attributes[0].attributes == {"x": 3.0, "y": 6.0} and attributes[0].members == [1.0, 3.0]


def test_a_bad_setting_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="--ensemble-reward must be one of mean, conservative, min, got 'max'"):
        EnsembleRule(("a", "b"), reward="max")
    with pytest.raises(ConfigError, match="--uncertainty-k must be a finite number >= 0, got -1"):
        EnsembleRule(("a", "b"), k=-1.0)


def test_stepwise_records_are_bad_records_for_an_ensemble():
    from rm.data.data_report import DataReport

    class Records:
        report = DataReport("skip")

        def lines(self, chunk):
            return [origin for origin, _ in chunk]

    job = RewardRecordsOnly(Records())
    chunk = [("f:1", {"text": "a"}), ("f:2", {"prompt": "p", "solutions": [["s"]]})]
    assert job.lines(chunk) == ["f:1"]
    assert Records.report.skipped[0].origin == "f:2"
    Records.report = DataReport("error")
    with pytest.raises(DataError, match=r"^f:2: a stepwise record asks for step scores, which an ensemble does not"):
        RewardRecordsOnly(Records()).lines(chunk)


def test_default_layouts_agree(lora_runs, tokenizer):
    """The ensemble's layout is the one each member gets alone."""
    ensemble = load_ensemble([str(r) for r in lora_runs], device="cpu")
    member = load(str(lora_runs[0]), device="cpu")
    assert type(ensemble_layout(ensemble)[0]) is type(default_layout(member.model, tokenizer.pad_token_id))


def test_a_large_batch_runs_on_the_merged_weight_and_gives_peft_s_output():
    """The fused forward (W + s B A built per call) against peft's own unmerged forward, on a batch large enough to
    take it and on one row, which keeps peft's; the base weight is left as it was."""
    import torch
    from peft import LoraConfig, get_peft_model
    from peft.tuners.lora import Linear

    from rm.scoring.ensemble_lora import activate, per_thread_adapters

    torch.manual_seed(0)
    net = get_peft_model(torch.nn.Sequential(torch.nn.Linear(16, 24)), LoraConfig(r=4, target_modules=["0"]))
    layer = next(m for m in net.modules() if isinstance(m, Linear))
    torch.nn.init.normal_(layer.lora_B["default"].weight)  # B starts at zero: the adapter would change nothing
    base = layer.base_layer.weight.clone()
    net.eval()
    big, one = torch.randn(3, 40, 16), torch.randn(1, 1, 16)
    with torch.no_grad():
        expected = [Linear.forward(layer, x) for x in (big, one)]
        per_thread_adapters(net)
        activate(net, "default")
        calls = []
        delta = layer.get_delta_weight
        layer.get_delta_weight = lambda a: calls.append(a) or delta(a)
        got = [net(x) for x in (big, one)]
    assert calls == ["default"]  # the batch of 120 rows merged once; the single row did not
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=0)
    assert torch.equal(layer.base_layer.weight, base)


def test_each_thread_runs_its_own_adapter_on_one_base():
    """Two adapters (LoRA layer and score-head copy) on one base, each thread its own at once, against peft's
    set_adapter forward of each, on a batch that takes the merged weight and on one that keeps the unmerged one."""
    import threading

    import torch
    from peft import LoraConfig, get_peft_model

    from rm.scoring.ensemble_lora import activate, per_thread_adapters

    torch.manual_seed(0)
    config = LoraConfig(r=4, target_modules=["0"], modules_to_save=["1"])
    net = get_peft_model(torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.Linear(24, 1)), config)
    net.add_adapter("other", config)
    with torch.no_grad():
        for name, p in net.named_parameters():
            if ".default." in name or ".other." in name:
                p.add_(torch.randn_like(p) * 0.1)
    net.eval()
    inputs = [torch.randn(3, 40, 16), torch.randn(1, 1, 16)]
    with torch.no_grad():
        expected = {}
        for adapter in ("default", "other"):
            net.set_adapter(adapter)
            expected[adapter] = [net(x) for x in inputs]
        assert not torch.allclose(expected["default"][0], expected["other"][0])
        assert per_thread_adapters(net)
    got, both = {}, threading.Barrier(2)

    def run(adapter: str) -> None:
        activate(net, adapter)
        both.wait()  # the other thread has set its own adapter too
        with torch.no_grad():
            got[adapter] = [net(x) for _ in range(5) for x in inputs][-2:]

    threads = [threading.Thread(target=run, args=(a,)) for a in ("default", "other")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for adapter in ("default", "other"):
        for g, e in zip(got[adapter], expected[adapter], strict=True):
            torch.testing.assert_close(g, e, atol=1e-5, rtol=0)


def test_templates_are_compared_on_the_text_they_write(lora_runs, tokenizer, tmp_path):
    """A LoRA run's own tokenizer (no chat template: HH text) and an export's (a template that writes HH text) write
    one text; a template that writes another text is refused, in one line naming the template."""
    import copy

    from rm.scoring.members import member_of, refuse_unshared

    run, exported = load(str(lora_runs[0]), device="cpu"), load(str(export(tokenizer, tmp_path / "e", 1)), device="cpu")
    assert not getattr(run.tokenizer, "chat_template", None) and exported.tokenizer.chat_template
    refuse_unshared([member_of(run), member_of(exported)], "ensemble", ("template",))
    chatml = copy.deepcopy(exported.tokenizer)
    chatml.chat_template = (
        "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    exported.tokenizer = chatml
    with pytest.raises(
        ConfigError, match=r"differ in their chat template, data.text_version or data.eos; members must"
    ):
        refuse_unshared([member_of(run), member_of(exported)], "ensemble", ("template",))
