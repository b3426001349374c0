"""``python -m rtpo.theory --out DIR [--quick]``."""

from rtpo.theory import cli_main

raise SystemExit(cli_main())
