"""The serving process's own parts: logs, request ids, health probes, the client's
address, the access log and the answers while the database is away."""
