"""Long-running reliability campaigns, run small by the test suite and at full size from the
command line (see each module's docstring and docs/reliability/campaigns.md)."""
