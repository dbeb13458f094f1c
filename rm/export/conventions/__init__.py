"""What an export says about the conventions its text was written by: how each response ends (data.eos)."""
