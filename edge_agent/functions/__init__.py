"""Serverless functions on the agent: warm pools of long-lived worker processes."""
