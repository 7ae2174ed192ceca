"""The hub's Prometheus metrics, one registry per hub (tests run several hubs in one process, so
never the client's global default registry). Names and types are tabled in docs/metrics.md.

* :mod:`.scheduler`: kube-scheduler's metrics under ``edgeplane_scheduler_`` (the scheduler reports
  to it through ``scheduling.instrument.FrameworkRecorder``);
* :mod:`.functions`: OpenWhisk's activation metrics per function;
* :mod:`.hub`: the registry, bid rounds and lease expiries, and what is read at scrape time from
  the hub's live state (nodes, power, allocation, the NATS bus, function instances).
"""
