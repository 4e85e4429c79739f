"""The simulate stage: SimAI's analytical model in closed form, or a user's SimAI, and the times it gives."""
