"""Coordination between hub processes: the store's hub lease (:mod:`.hub_lease`)."""
