"""Checkpointed state is untrusted input: the seal over what trusted code decided, the guard every node
runs behind, and the versions and updates of that state."""
