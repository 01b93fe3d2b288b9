"""The batch jobs and operators' tools, as manage.py commands."""
