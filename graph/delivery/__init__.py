"""Running effects: reads under their limits, approved writes behind the atomic claim exactly once, the
handler's scope and credentials, and recovery of unknown outcomes."""
