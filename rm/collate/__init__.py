"""Token ids to batches of named tensors: the padded, shared-prefix and scoring layouts, and the batch planner.

No model code here: the layouts only describe rows; `rm/model/` turns them into attention masks.
"""
