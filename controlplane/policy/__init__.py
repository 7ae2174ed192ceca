"""Trainer side of the edge agent's local policy: environment, training, export, quantisation."""
