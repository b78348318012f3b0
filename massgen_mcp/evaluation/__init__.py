"""``massgen-mcp eval``'s machinery: does the team beat its best member, by how much, at what cost?

A face like the CLI and the MCP server: it runs questions through :class:`ConsensusService` and
reads their records. Its parts, each usable alone:

* :mod:`.answers`: the answer in a model's reply, by the field's conventions, and whether it is
  right;
* :mod:`.datasets`: questions from JSONL, CSV, Parquet or a Hugging Face dataset;
* :mod:`.stats`: bootstrap intervals, McNemar's exact test, cost per correct answer;
* :mod:`.runner` and :mod:`.scoring`: the runs, and ``results.json`` (:mod:`.records`);
* :mod:`.summary`: the figures (:class:`~.summary.EvalSummary`) and the terminal's table;
  :mod:`.report`: ``summary.html``.
"""
