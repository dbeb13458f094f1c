"""A process reward model (one reward per solution step) as a standard `AutoModelForTokenClassification` folder."""
