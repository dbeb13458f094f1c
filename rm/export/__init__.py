"""A run's weights as a standard `AutoModelForSequenceClassification` folder: restore, write, card, Hub."""
