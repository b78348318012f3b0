"""Evidence tools an agent may call within its turn (read-only, confined, capped)."""
