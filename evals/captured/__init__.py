"""Production incidents as evaluation cases: capturing a thread's verified facts, reviewing and editing
the captured case, its MAC-bound rows and export."""
