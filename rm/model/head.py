"""A reward head on a causal LM's backbone, for architectures transformers has no sequence-classification class for.

rm writes this file, unchanged, into the export of such a model as `modeling_rm_reward.py`, with a
few lines naming the architecture's classes at the end, so that plain transformers can load the
export with `trust_remote_code=True` (the Hub's usual way to ship a class transformers lacks).
That is why it imports only torch and transformers, never rm. rm itself builds the same classes
in-process (rm/model/architecture.py) and never runs the exported copy.

The head is that of transformers' own `GenericForSequenceClassification` (a bias-free `score` linear
on the last hidden state), with two differences: the backbone is the causal LM's own, under the
causal LM's own attribute name, so a causal-LM checkpoint loads into it unchanged; and the reward is
read at each row's last attended token (from the attention mask), not at the last token that differs
from `pad_token_id`, which is wrong when pad == eos.
"""

import torch
from torch import nn
from transformers.modeling_outputs import SequenceClassifierOutputWithPast


class RewardHead:
    """Put before the architecture's `PreTrainedModel` subclass; the concrete class sets
    `backbone_class` (e.g. GraniteModel) and `base_model_prefix` (the causal LM's attribute for it)."""

    backbone_class: type = None

    def __init__(self, config):
        super().__init__(config)
        self.num_labels = config.num_labels
        setattr(self, self.base_model_prefix, self.backbone_class(config))
        self.score = nn.Linear(config.get_text_config().hidden_size, config.num_labels, bias=False)
        self.post_init()

    @classmethod
    def is_custom_code(cls):
        # All but the `score` layer is transformers' own code, so loading must treat it as such: initialise
        # non-persistent buffers (Falcon-H1's mup_vector) and convert older checkpoint layouts (MoE experts).
        return False

    @classmethod
    def _can_set_experts_implementation(cls):
        # transformers looks for its experts decorator in the source of the class's own module; the
        # backbone's module is the one that has it (OLMoE, Nemotron-H…).
        return cls.backbone_class._can_set_experts_implementation()

    def forward(self, input_ids=None, attention_mask=None, inputs_embeds=None, **kwargs):
        """`logits` [rows, num_labels]: the score head at each row's last attended token."""
        kwargs.pop("labels", None)  # a reward model is trained by rm's pairwise loss, not here
        out = self.base_model(input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs)
        hidden = out.last_hidden_state  # [rows, T, H]
        rows, t = hidden.shape[:2]
        if attention_mask is not None and attention_mask.dim() == 2:
            positions = torch.arange(t, device=hidden.device)
            last = (attention_mask.to(hidden.device).bool() * positions).amax(dim=1)  # [rows]
        else:
            last = torch.full((rows,), t - 1, device=hidden.device)
        logits = self.score(hidden[torch.arange(rows, device=hidden.device), last])  # [rows, num_labels]
        return SequenceClassifierOutputWithPast(logits=logits)
