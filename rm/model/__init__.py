"""The reward model: a transformers model read at its last token, its masks, layout probe, LoRA and loss."""
