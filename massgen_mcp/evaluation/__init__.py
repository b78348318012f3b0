"""``massgen-mcp eval``'s machinery: does the team beat its best member, by how much, at what cost?

A face like the CLI and the MCP server: it runs questions through :class:`ConsensusService` and
reads their records. Its parts, each usable alone:

* :mod:`.answers`: the answer in a model's reply, by the field's conventions, and whether it is
  right;
* :mod:`.datasets`: questions from JSONL, CSV, Parquet or a Hugging Face dataset;
* :mod:`.stats`: bootstrap intervals, McNemar's exact test, cost per correct answer.
"""
