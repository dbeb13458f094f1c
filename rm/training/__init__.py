"""One training run: set-up (`run`), the loop (`loop`), checkpoints, faults, and where it runs (`accelerator`,
`output_dir`, `trackers`)."""
