"""Which team runs, and may it use my keys: the default team found on this machine, MassGen
YAML configs, the files a run may read, and the consent a cloned repository's config needs
before it may send the user's keys or files anywhere."""
