"""The model card's "End of sequence" section: which data.eos convention the model was trained with, and how TRL's
`RewardTrainer` and OpenRLHF, whose reward datasets end texts their own ways, should feed it.

What the section says of the tools is read from their code, not run here:

- TRL 1.16, `RewardTrainer._prepare_dataset`: a plain-text (non-conversational) chosen and rejected get `eos_token`
  appended unless they already end with it, then `prompt + chosen` is tokenized whole; a conversation is tokenized
  by its chat template alone, with no EOS added.
- OpenRLHF 0.11.2, `RewardDataset.__getitem__`: `(prompt + chosen).rstrip("\\n")`, then `" " + eos_token` unless it
  already ends with it, tokenized with `add_special_tokens=False`, the last id then forced to EOS (so it stays after
  truncation); `get_llm_for_sequence_regression`'s reward model reads the value at the last attended token, which
  in PPO is the EOS the policy generated (no space before it).
"""

from __future__ import annotations

from rm.config import RunConfig

EOS_TEXT = {
    "none": "without an end-of-sequence token (`data.eos: none`): the reward is read at the response's own last token, "
    "so score `prompt + response` as written. TRL's `RewardTrainer` appends `eos_token` to plain-text pairs: give it "
    "conversational data (message lists, which get no EOS) or pre-tokenized `chosen_ids`/`rejected_ids`. OpenRLHF "
    "reads its PPO rollouts at the EOS the policy generated: train with `data.eos=eos` for its local reward model "
    '(or `data.eos=space_eos` for its reward-model trainer, which appends `" " + eos_token`), or serve this model '
    "with `rm serve` (its `/get_reward` drops a rollout's final EOS).",
    "eos": "with the tokenizer's EOS text after every response (`data.eos: eos`), as TRL's `RewardTrainer` writes "
    "plain text: the reward is read at that EOS, so append `tokenizer.eos_token` to each text you score. TRL's "
    "`RewardTrainer` takes plain-text pairs as they are; conversational data gets no EOS there, so append it. "
    "OpenRLHF's PPO reads its local reward model at the EOS the policy generated, which is this ending; its "
    'reward-model trainer writes `" " + eos_token`, one token more than trained.',
    "space_eos": "with a space, then the tokenizer's EOS text, after every response (trailing newlines dropped; "
    "`data.eos: space_eos`), as OpenRLHF's reward dataset writes: OpenRLHF's reward-model trainer trains and "
    'evaluates on it as it is. Append `" " + tokenizer.eos_token` to each text you score; TRL\'s `RewardTrainer` '
    "and OpenRLHF's PPO rollouts end with the EOS without the space (for PPO, train with `data.eos=eos`).",
}
"""What the card says about how a response ends, by data.eos (rm/data/formats/text_rule.py)."""


def eos_section(cfg: RunConfig) -> str:
    """The section for the run's data.eos, which config.json keeps as `rm_eos`."""
    ends = (
        "`rm score`, `rm eval` and `rm serve` score texts as written."
        if cfg.data.eos == "none"
        else "`rm score`, `rm eval` and `rm serve` end texts so themselves (config.json's `rm_eos` says how); a text "
        "already ending with the EOS text gets no second one, so a rollout that ended with its EOS is read as it ended."
    )
    return f"## End of sequence\n\nTrained {EOS_TEXT[cfg.data.eos]} {ends}\n"
