"""Stepwise solutions as token ids: each step's pieces and where its score is read."""
