"""Running the stages without Prefect: persona and filler jobs, checkpoints, the plan and its ETA."""
