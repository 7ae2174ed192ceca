"""Multi-cluster federation: the config file and cross-cluster placement."""
