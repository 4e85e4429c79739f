"""The workload stage: SimAI workload files made by AICB's schedule (emulated or run) or Megatron's real one."""
