"""Operations: leases on jobs, shared rate counters, retention of what expired."""
