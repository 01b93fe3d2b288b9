"""The only code that writes ledger rows. Interfaces call these functions and nothing else."""
