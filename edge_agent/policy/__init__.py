"""The agent's ``edge-agent policy`` commands (:mod:`edge_agent.policy.cli`).

The local policy itself (features, actions, weights, the ONNX runtime and the shipped model) is
part of the contract both sides import: :mod:`edgeplane_contract.policy`.
"""
