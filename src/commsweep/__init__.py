"""commsweep: sweep the communication of LLM training through AICB-style workloads and SimAI."""

__version__ = "0.1.0"
