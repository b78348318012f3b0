import sys

from massgen_mcp.cli import main

sys.exit(main())
