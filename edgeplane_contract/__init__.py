"""The edgeplane contract: what the hub (``controlplane``) and the agent (``edge_agent``) share.

One definition, imported by both sides, of:

* the wire: every NATS subject and message (:mod:`.messages`, the ``edgeplane.v1`` prefix), the
  NATS connection and payload limits (:mod:`.transport`), nkey/TLS credentials
  (:mod:`.credentials`) and an agent's credentials file (:mod:`.enrolment`);
* resources and hardware: CPU/memory quantities and node types (:mod:`.resources`), MIG
  profiles and their placement rules (:mod:`.mig`), the per-node-type power model (:mod:`.power`);
* the objective: the reward terms, their weights and the battery rule (:mod:`.objective`);
* the local policy: features, actions, weights, the ONNX runtime and the shipped model
  (:mod:`.policy`);
* the errors both raise (:mod:`.errors`) and small helpers (:mod:`.arrays`, :mod:`.urls`).

The rule: this package imports nothing from ``controlplane`` or ``edge_agent`` (and its modules
import each other without a cycle). ``edge_agent`` imports the contract and nothing of the hub;
the hub's scheduler, simulator and trainer import the contract too. ``tests/unit/
test_import_graph.py`` checks all of it; ``docs/architecture.md`` shows the layout.
"""
