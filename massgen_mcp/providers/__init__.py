"""Model providers behind one seam: litellm for hosted and self-hosted APIs, the embedded
llama.cpp model for ``local/*``, coding-agent CLIs for ``cli/*``, routed by :mod:`.registry`."""
