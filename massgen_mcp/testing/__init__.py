"""Test doubles that speak real protocols: the scripted models (:mod:`.scripted`), an
OpenAI-compatible server whose answers and votes follow a script. Used by the test suite, the
benchmarks and the offline demo; never by a real run."""
