"""Parameter identification: online RLS (its own process) and batch least squares."""
