"""The composition root (``runner``): it imports the domain packages (hub, serverless, bus,
store) and their adapters (the HTTP API, the scheduler extender); none of them imports it."""
