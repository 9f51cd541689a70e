"""Release control's home: what a release is (a bundle of tools, policy and a reviewed manifest),
loading it by id, and the control plane an operator drives: evidence and sign-off, promotion through
shadow and canary, rollback, thread migration, status, and the rollout rules and signals the
automatic stop judges by. The graph's run-time routing between arms lives in
`toolgate.graph.rollout`; the records in `toolgate.store`.
"""
