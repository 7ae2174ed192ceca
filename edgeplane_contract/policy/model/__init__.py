"""Package data: the shipped local policy models and their metadata.json."""
