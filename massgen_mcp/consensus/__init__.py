"""The consensus protocol: state machine, prompts, action parsing and the async engine."""
