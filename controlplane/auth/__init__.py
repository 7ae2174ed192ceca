"""Identities: API bearer tokens with scopes, agent join tokens, and their errors."""
