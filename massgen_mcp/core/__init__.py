"""The words every layer speaks: the run spec, the records, the errors, secrets and the
environment, and the file, network, input and child-process helpers.

Nothing here imports anything of massgen-mcp above ``core`` (a contract in ``.importlinter``
keeps it so), which is why every other package may import it.
"""
