"""`python -m dphpo ...` runs the dphpo command line."""

from dphpo.cli import main

raise SystemExit(main())
